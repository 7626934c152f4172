"""Programs nobody here wrote, recorded by ``python -m mirrortutor record`` (issue 22, item 7).

Each program runs twice, each time in a fresh Python: plainly, on stock ``tf.distribute``, and
under ``python -m mirrortutor record --record everything``. What the program computes (its
losses, metrics and weights, printed on stdout as exact floats or hashes of the weights' bytes)
must be the same, byte for byte; and in every trace file, every step is recorded, the steps that
carry gradients are as many as the program's optimizer steps, and each names the trainable
variables the step changed (and only those, or ones whose gradient was zero), once per replica.

The programs come from installed packages and are read at run time; nothing of them is copied into
this repository. The scripts in ``thirdparty/`` only drive them (data, sizes, seeds, printing):

==========================  =========================  ==========================================
program (whose)             package (pinned)           edits for Keras 3 / for a local run
==========================  =========================  ==========================================
``RandomSearch`` with a     keras-tuner 1.4.8          none; keras-tuner needs tensorboard
``distribution_strategy``   (+ tensorboard 2.21.0)     (it imports tensorboard's hparams API
(keras-tuner's Tuner)                                  whenever the backend is TensorFlow)
MultiWorkerMirrored-        tensorflow 2.21.0          see ``tf_docstring_loop.EDITS``: compile()
Strategy docstring          (already a dependency)     gets the in-scope optimizer and a loss;
(Keras fit + custom loop)                              fit gets an epoch length; seeds; the
                                                       names it leaves undefined
two tf.distribute tests     keras 3.15.1               none; ``fit`` is seeded (the tests
shipped in the Keras wheel  (already a dependency)     shuffle unseeded)
==========================  =========================  ==========================================

TensorFlow's models repository is not among them: every tf-models package on PyPI pins another
TensorFlow (tf-models-no-deps 2.19.0 and tf-models-official 2.20.0 require ``tensorflow~=2.19.0``
and ``~=2.20.0``, tf-models-nightly requires tf-nightly), and its training code imports tf_keras,
Keras 2.

The runs start together (a module fixture) so the machine's cores overlap their start-up; each test
then waits for its own program.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import mirrortutor as mt

HERE = Path(__file__).resolve().parent / "thirdparty"
TIMEOUT = 600  # seconds for one run; a run of these programs takes seconds when the machine is idle


@dataclass(frozen=True)
class Program:
    """A driver script in ``thirdparty/`` and what a run of it must show."""

    script: str
    replicas: int  # replicas of each strategy the program creates
    #: for each strategy it creates, in order (one trace file each): how many of its steps train,
    #: i.e. apply gradients, counted from the program's own sizes
    train_steps: tuple[int, ...]
    args: tuple[str, ...] = ()  # "{work}" stands for a scratch folder of the run's own
    record_args: tuple[str, ...] = field(default=("--replicas", "2"))


PROGRAMS = {
    # 2 trials x 2 epochs x (64 examples / batch 16) steps; nothing else runs a step.
    "keras-tuner": Program("kerastuner_search.py", replicas=2, train_steps=(16,),
                           args=("{work}",)),
    # fit: steps_per_epoch=2, then the docstring's loop: 4 steps. No TF_CONFIG: a one-worker job,
    # whose one replica is the CPU (see tf_docstring_loop.py), so no --replicas.
    "tf-docstring": Program("tf_docstring_loop.py", replicas=1, train_steps=(6,), record_args=()),
    # regulariser test: one fit step (a batch of 12, batch_size=12), then a strategy.run reading
    # the kernel; EMA test: 2 epochs of one step (10 examples), each validated, then 2 evaluates.
    "keras-tests": Program("keras_own_tests.py", replicas=2, train_steps=(1, 2)),
}


@dataclass
class Run:
    """One started run of a program: plain or recorded."""

    process: subprocess.Popen
    out: Path  # the trace folder (recorded runs)
    done: subprocess.CompletedProcess | None = None

    def result(self) -> subprocess.CompletedProcess:
        """Wait for the run; it must have succeeded."""
        if self.done is None:
            stdout, stderr = self.process.communicate(timeout=TIMEOUT)
            self.done = subprocess.CompletedProcess(self.process.args, self.process.returncode,
                                                    stdout, stderr)
        assert self.done.returncode == 0, f"{self.done.args} failed:\n{self.done.stderr[-4000:]}"
        return self.done


def start(program: Program, folder: Path, *, recorded: bool) -> Run:
    """Start ``program`` in a fresh Python in ``folder``; recorded: under ``mirrortutor record``."""
    folder.mkdir(parents=True)
    script = str(HERE / program.script)
    args = [a.format(work=folder / "work") for a in program.args]
    out = folder / "traces"
    if recorded:
        command = [sys.executable, "-m", "mirrortutor", "record", "--record", "everything",
                   "--out", str(out), "--quiet", *program.record_args, script, *args]
    else:
        command = [sys.executable, script, *args]
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ))
    return Run(process, out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Run, Run]]:
    """Every program's plain and recorded run, started at once."""
    root = tmp_path_factory.mktemp("thirdparty")
    started = {name: (start(p, root / name / "plain", recorded=False),
                      start(p, root / name / "recorded", recorded=True))
               for name, p in PROGRAMS.items()}
    yield started
    for pair in started.values():
        for run in pair:
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()


def changed_by(trace: mt.Trace, step: int) -> set[str]:
    """The trainable variables whose value the step changed: its value after the step (recorded
    with ``Recording.everything()``) differs from its value after the last recorded step before,
    or from its initial value. This is what the optimizer updated, read from the variables
    themselves, not from the gradients, so it can check how the gradients are named."""
    initial = {v.name: v.initial_values[0] for v in trace.variables
               if v.trainable and v.initial_values is not None}
    before = dict(initial)
    for earlier in trace.steps[: trace.steps.index(step)]:
        before.update({r.name: r.values[0] for r in trace.sync(earlier) if r.values})
    return {r.name for r in trace.sync(step) if r.name in initial and r.values
            and not np.array_equal(r.values[0], before[r.name])}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_recorded_program_prints_what_the_plain_run_prints(runs, name):
    """The program's stdout (losses, metrics, weight hashes as exact floats) under ``record`` is
    byte for byte its plain run's, and it is not empty."""
    plain, recorded = (run.result() for run in runs[name])
    assert plain.stdout.strip(), f"{name} printed nothing to compare"
    assert recorded.stdout == plain.stdout


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_step_names_every_trained_variable_on_every_replica(runs, name):
    """Each trace file of the recorded run: every step recorded; as many steps with gradients as
    the program's optimizer steps; each names every trainable variable the step changed (read from
    their values, not from the gradients), and nothing else but variables whose all-reduced
    gradient was exactly zero (an SGD step leaves those as they were: the docstring program's own
    loop computes only zero gradients, its loss reading raw outputs as probabilities); every
    named variable once for every replica."""
    program = PROGRAMS[name]
    recorded = runs[name][1]
    recorded.result()
    files = sorted(recorded.out.glob("*.npz"))
    assert len(files) == len(program.train_steps), files
    for path, train_steps in zip(files, program.train_steps):
        trace = mt.Trace.load(path)
        assert trace.steps == list(range(trace.steps_run)), f"{path.name}: a step not recorded"
        trainable = {v.name for v in trace.variables if v.trainable}
        trained = [step for step in trace.steps if trace.gradients(step)]
        assert len(trained) == train_steps, f"{path.name}: gradients at steps {trained}"
        for step in trace.steps:
            gradients = trace.gradients(step)
            named = {g.variable for g in gradients}
            assert named <= trainable, named - trainable
            if gradients:
                # what the step changed is named; what is named and unchanged had a zero gradient
                changed = changed_by(trace, step)
                assert changed <= named, f"{path.name} step {step}: {changed - named} unnamed"
                zero = {g.variable for g in gradients if g.reduced_norm == 0.0}
                assert named - changed <= zero, f"{path.name} step {step}: {named - changed}"
            pairs = sorted((g.variable, g.replica_id) for g in gradients)
            assert pairs == sorted((v, r) for v in named for r in range(program.replicas))
