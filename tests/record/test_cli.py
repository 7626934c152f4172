"""``python -m mirrortutor record SCRIPT.py``: any program, unchanged, recorded (issue 22).

Each test runs the command line in a fresh process, as a student would, on a small program of
plain TensorFlow written to a temporary folder. ``python -m mirrortutor run`` runs the same program
on the same devices with nothing replaced, so the two outputs can be compared byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mirrortutor as mt

#: A custom training loop of plain TensorFlow (chapter 03's), shipped as the README's example.
PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "custom_loop.py"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mirrortutor", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("program")
    (folder / "train.py").write_text(PROGRAM.read_text())
    return folder


def test_record_prints_what_the_plain_run_prints_and_writes_a_trace(program):
    """Same stdout as the stock run, byte for byte; a trace file with named gradients and a
    timeline; the file's path, the summary and mt.diagnose's verdict on stderr."""
    plain = cli("run", "--replicas", "2", "train.py", "a1", cwd=program)
    recorded = cli("record", "--replicas", "2", "--out", "traces", "train.py", "a1", cwd=program)
    assert plain.returncode == recorded.returncode == 0, recorded.stderr
    assert plain.stdout == recorded.stdout
    assert plain.stdout.startswith("replicas: 2 arguments: ['a1']")
    assert len(plain.stdout.splitlines()) == 9
    path = program / "traces" / "trace-0.npz"
    assert f"trace written to traces/trace-0.npz" in recorded.stderr
    assert "8 step(s) run, 8 recorded" in recorded.stderr
    assert "Dominant cause:" in recorded.stderr or "No cause takes" in recorded.stderr
    trace = mt.Trace.load(path)
    assert trace.steps_run == 8 and len(trace.timed_steps()) == 8
    names = {v.name for v in trace.variables if v.trainable}
    assert {(g.variable, g.replica_id) for g in trace.gradients(3)} == {
        (n, r) for n in names for r in (0, 1)}


def test_a_program_that_raises_keeps_its_trace_and_its_own_traceback(program):
    """The trace of the steps that ran is saved; the traceback starts in the program, not in
    mirrortutor; the exit status is Python's for an uncaught exception."""
    run = cli("record", "--replicas", "2", "--out", "failed", "train.py", "--fail", cwd=program)
    assert run.returncode == 1
    traceback = run.stderr[run.stderr.index("Traceback"):]
    assert traceback.splitlines()[1].strip().startswith(f'File "{program / "train.py"}"')
    assert "mirrortutor" not in traceback.split("ValueError")[0]
    assert "ValueError: this program was asked to fail (--fail)" in traceback
    assert mt.Trace.load(program / "failed" / "trace-0.npz").steps_run == 5


def test_a_program_without_a_strategy_is_told_so(tmp_path):
    (tmp_path / "hello.py").write_text("print('hello')\n")
    run = cli("record", "--out", "t", "hello.py", cwd=tmp_path)
    assert run.returncode == 0 and run.stdout == "hello\n"
    assert "created no tf.distribute.MirroredStrategy, MultiWorkerMirroredStrategy or " \
        "ParameterServerStrategy" in run.stderr
    assert not list((tmp_path / "t").iterdir())


def test_a_missing_program_or_an_unwritable_folder_is_a_plain_error(tmp_path):
    """Nothing runs; exit status 2 and one line saying what to do (no Python traceback)."""
    missing = cli("record", "nothere.py", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "There is no program at 'nothere.py'" in missing.stderr
    (tmp_path / "hello.py").write_text("print('hello')\n")
    (tmp_path / "a_file").write_text("")
    blocked = cli("record", "--out", "a_file/traces", "hello.py", cwd=tmp_path)
    assert blocked.returncode == 2 and blocked.stdout == "" and "Traceback" not in blocked.stderr
    assert "Cannot write trace files to 'a_file/traces'" in blocked.stderr
    assert "--out DIR" in blocked.stderr


def test_the_substitution_is_undone_and_errors_are_mirrortutors(tmp_path):
    """In a process: the recording classes only while the program runs; ProgramError for a bad
    path, from the API too."""
    import tensorflow as tf

    from mirrortutor.record.program import run_program
    from mirrortutor.record.substitute import substituted

    original = tf.distribute.MirroredStrategy
    with substituted() as created:
        assert tf.distribute.MirroredStrategy is not original
        assert issubclass(tf.distribute.MirroredStrategy, mt.MirroredStrategy)
        assert tf.distribute.MirroredStrategy.__name__ == "MirroredStrategy"
    assert tf.distribute.MirroredStrategy is original and created == []
    with pytest.raises(mt.errors.ProgramError, match="There is no program"):
        run_program(tmp_path / "none.py", out=tmp_path)


#: The same loop under MultiWorkerMirroredStrategy: each worker runs this file with its TF_CONFIG.
WORKER = """
import keras, numpy as np, tensorflow as tf
keras.utils.set_random_seed(0)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
data = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(8))
with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)

def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(model(xb) - yb)[:, 0], global_batch_size=8)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))
    return loss

@tf.function
def train(batch):
    return strategy.reduce("SUM", strategy.run(step, args=batch), axis=None)

for batch in data:
    print(float(train(batch)))
"""

#: Both workers in one private network namespace (their servers listen on every interface).
LAUNCH = """
import json, os, socket, subprocess, sys
import mirrortutor as mt
os.chdir(FOLDER)
ports = []
for _ in range(2):
    with socket.socket() as s:
        s.bind(("localhost", 0)); ports.append(s.getsockname()[1])
workers = [f"localhost:{p}" for p in ports]
procs = [subprocess.Popen([sys.executable, "-m", "mirrortutor", "record", "--out", "traces",
                           "worker.py"], env={**os.environ, "TF_CONFIG": json.dumps(
                               mt.tf_config(workers, i))}, stdout=subprocess.PIPE, text=True)
         for i in range(2)]
outs = [p.communicate(timeout=240)[0] for p in procs]
print(json.dumps({"codes": [p.returncode for p in procs], "outs": outs}))
"""


def test_each_worker_writes_its_own_trace_and_they_merge(tmp_path):
    """Two worker processes under `record`: trace-worker0/1 files, which mt.WorkerTraces puts
    together: the all-reduced gradient is the sum of all four local ones, the losses agree."""
    import json

    from conftest import run_python

    (tmp_path / "worker.py").write_text(WORKER)
    run = run_python(LAUNCH.replace("FOLDER", repr(str(tmp_path))), contained=True)
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["codes"] == [0, 0], run.stderr[-3000:]
    assert result["outs"][0] == result["outs"][1] and len(result["outs"][0].splitlines()) == 4
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == [
        "trace-worker0-0.npz", "trace-worker1-0.npz"]
    workers = mt.WorkerTraces.load(tmp_path / "traces")
    assert [t.worker for t in workers.traces] == [0, 1]
    assert workers.allreduce_error(step=0) < 1e-6
    assert {g.variable for g in workers.traces[1].gradients(0)} == {
        v.name for v in workers.traces[1].variables if v.trainable}
