"""``python -m mirrortutor record SCRIPT.py``: any program, unchanged, recorded (issue 22).

Each test runs the command line in a fresh process, as a student would, on a small program of
plain TensorFlow written to a temporary folder. ``python -m mirrortutor run`` runs the same program
on the same devices with nothing replaced, so the two outputs can be compared byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mirrortutor as mt

#: A custom training loop of plain TensorFlow: what a student writes after chapter 03.
PROGRAM = """
    import sys
    import numpy as np, tensorflow as tf, keras

    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MirroredStrategy()
    GLOBAL_BATCH = 16
    x = np.random.default_rng(0).normal(size=(64, 5)).astype("float32")
    data = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(GLOBAL_BATCH))
    with strategy.scope():
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.05)

    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.square(model(xb) - yb)[:, 0],
                                              global_batch_size=GLOBAL_BATCH)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    @tf.function
    def train(batch):
        return strategy.reduce("SUM", strategy.run(step, args=batch), axis=None)

    print("replicas", strategy.num_replicas_in_sync, "argv", sys.argv[1:])
    for epoch in range(2):
        for i, batch in enumerate(data):
            print(epoch, i, repr(float(train(batch))))
            if "--fail" in sys.argv and epoch == 1:
                raise ValueError("the program's own mistake")
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mirrortutor", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("program")
    (folder / "train.py").write_text(textwrap.dedent(PROGRAM))
    return folder


def test_record_prints_what_the_plain_run_prints_and_writes_a_trace(program):
    """Same stdout as the stock run, byte for byte; a trace file with named gradients and a
    timeline; the file's path, the summary and mt.diagnose's verdict on stderr."""
    plain = cli("run", "--replicas", "2", "train.py", "a1", cwd=program)
    recorded = cli("record", "--replicas", "2", "--out", "traces", "train.py", "a1", cwd=program)
    assert plain.returncode == recorded.returncode == 0, recorded.stderr
    assert plain.stdout == recorded.stdout
    assert plain.stdout.startswith("replicas 2 argv ['a1']") and len(plain.stdout.splitlines()) == 9
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
    assert "ValueError: the program's own mistake" in traceback
    assert mt.Trace.load(program / "failed" / "trace-0.npz").steps_run == 5


def test_a_program_without_a_strategy_is_told_so(tmp_path):
    (tmp_path / "hello.py").write_text("print('hello')\n")
    run = cli("record", "--out", "t", "hello.py", cwd=tmp_path)
    assert run.returncode == 0 and run.stdout == "hello\n"
    assert "created no tf.distribute.MirroredStrategy or MultiWorkerMirroredStrategy" in run.stderr
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
