"""One worker process of ``cluster.run_program``: the student's script, unchanged, with its TF_CONFIG.

Forked by :mod:`mirrortutor.clusters.launcher` (TensorFlow imported once by its forkserver), with
this worker's ``TF_CONFIG`` in the environment, it runs the script as ``python SCRIPT ARGS`` would
(:func:`mirrortutor.record.program.run_program`): under the recording substitution
(``record=True``, the same as ``python -m mirrortutor record``; each worker writes its trace to
``trace-worker<i>-0.npz`` in the run's folder) or on stock TensorFlow (``record=False``). The
script's standard output and error go to ``worker_<i>.stdout`` / ``worker_<i>.stderr``; how it
ended to ``worker_<i>.json``.

**A worker that finishes waits for the others before its process ends.** In
``MultiWorkerMirroredStrategy`` a worker receives a peer's part of an all-reduce by asking the peer
for it (a ``RecvBuf`` call to the peer's server), so the peer's own op can end before the data has
left it. Nothing in TF makes a finished worker wait: the strategy configures TF's coordination
service with ``shutdown_barrier_timeout_in_ms=0`` (``collective_all_reduce_strategy.py``, the
``configure_coordination_service`` call; ``context.py`` gives it that default), which means no
barrier at shutdown. A worker that ends first and exits can thus close its sockets while a peer
still pulls its last step's data, and the peer fails with "Collective ops is aborted by: Socket
closed". On a real cluster the machines stay up. Here a worker whose program ended well keeps its
process, and with it TF's server, until every peer has written how it ended (or was killed by
``kill_worker``), for at most :data:`PEER_WAIT` seconds. The program and its numbers are not
touched, and the time it reports is its own.

**Killing a worker in a step** is done here, outside the program, by observation: the recording
strategy delivers each recorded step to its trace (``Trace.slot``), and when this worker's
recording delivers step ``kill_at`` (counting from 0), the process sends itself SIGKILL, as an
out-of-memory kill or a preempted machine would. Inside a ``tf.function`` the recording runs after
the ``strategy.run`` it records (TF runs a function's stateful ops in program order), so the
worker dies after that step's gradient all-reduce, before whatever the program does next (a
``strategy.reduce`` of the loss, a print); a program that runs its steps eagerly dies as the step
begins. The program's code is not touched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
import time

#: Longest a worker whose program ended well keeps its server up for its peers (module doc).
PEER_WAIT = 30.0


def one_line(exc: BaseException) -> str:
    """The error's type and its first telling line (TF puts "Graph execution error:" first)."""
    skip = ("Graph execution error", "Detected at node", "File ", "Additional GRPC")
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(exc))
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    telling = [l for l in lines if not l.startswith(skip)]
    line = re.sub(r":?\s*goo\.gle/\S+", "", (telling or lines or [""])[0])  # varies run to run
    return f"{type(exc).__name__}: {line}"


class KillAt(list):
    """The list the substitution fills with the strategies the program creates; with ``step``,
    each new strategy's trace kills this process when its recording delivers that step."""

    def __init__(self, step: int | None, run_dir: str = "", index: int = 0):
        super().__init__()
        self.step, self.run_dir, self.index = step, run_dir, index  # where to say "killed"

    def append(self, strategy) -> None:
        super().append(strategy)
        if self.step is None:
            return
        trace, last = strategy.trace, self.step
        slot = trace.slot

        def watched(step: int):
            if step >= last:
                sys.stdout.flush()
                sys.stderr.flush()
                open(os.path.join(self.run_dir, f"worker_{self.index}.killed"), "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return slot(step)

        trace.slot = watched  # this instance only: the observation point, nothing else changes


def _outputs(run_dir: str, index: int) -> None:
    """The script's stdout and stderr into files of their own, written through (a killed
    worker's lines are not lost in a buffer)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        sink = os.open(os.path.join(run_dir, f"worker_{index}.{name}"),
                       os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(sink, fd)
        os.close(sink)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)


def forked(run_dir: str, index: int, tf_config: str, spec: str) -> None:
    """A worker forked from the launcher's forkserver: its TF_CONFIG, then the script."""
    os.environ.update(TF_CONFIG=tf_config, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    spec = json.loads(spec)
    _outputs(run_dir, index)
    os.chdir(spec["cwd"])  # the notebook's folder: the script's relative paths mean the same
    from ..record.program import run_program
    from ..record.records import Recording

    t0 = time.monotonic()
    recording = Recording(**spec["recording"]) if spec["recording"] else Recording()
    kill_at = spec["kill_at"] if spec["kill_worker"] == index else None
    if kill_at is not None:  # the step that triggers the kill must be recorded
        recording = dataclasses.replace(recording,
                                        first_steps=max(recording.first_steps, kill_at + 1))
    created = KillAt(kill_at, run_dir, index)
    code, error = 1, ""
    try:
        run = run_program(spec["script"], spec["args"], out=run_dir if spec["record"] else None,
                          recording=recording, created=created, record=spec["record"])
        code = run.exit_code
        if run.error is not None:
            sys.stderr.write(run.error_text)
            error = one_line(run.error)
        elif run.error_text:
            error = run.error_text.strip().splitlines()[0]
    except Exception as exc:  # mirrortutor's own failure (a trace it could not write): said
        error = f"mirrortutor: {one_line(exc)}"
        sys.stderr.write(error + "\n")
    with open(os.path.join(run_dir, f"worker_{index}.json.tmp"), "w") as f:
        json.dump({"exit_code": code, "error": error, "seconds": time.monotonic() - t0}, f)
    os.replace(os.path.join(run_dir, f"worker_{index}.json.tmp"),
               os.path.join(run_dir, f"worker_{index}.json"))
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 0:  # a peer may still pull this worker's last all-reduce data (module doc)
        _wait_for_peers(run_dir, index, _workers(tf_config))
    # TF's collective runtime can hang on exit after a peer died; all is written: leave.
    os._exit(code)


def _workers(tf_config: str) -> int:
    """How many tasks the program's cluster has (every job of its ``TF_CONFIG``)."""
    return sum(len(tasks) for tasks in json.loads(tf_config)["cluster"].values())


def _wait_for_peers(run_dir: str, index: int, workers: int) -> None:
    """Until every other worker has said how it ended (``worker_<i>.json``) or was killed
    (``worker_<i>.killed``), at most :data:`PEER_WAIT` seconds."""
    deadline = time.monotonic() + PEER_WAIT
    waiting = [i for i in range(workers) if i != index]
    while waiting and time.monotonic() < deadline:
        waiting = [i for i in waiting if not any(
            os.path.exists(os.path.join(run_dir, f"worker_{i}.{end}")) for end in ("json", "killed"))]
        if waiting:
            time.sleep(0.02)
