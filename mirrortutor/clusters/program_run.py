"""What ``cluster.run_program(...)`` returns: how each worker's copy of a plain program ended.

``mt.MultiWorkerCluster.run_program("programs/08_worker.py", "--steps", "16")`` runs the script,
unchanged, in every worker process with that worker's ``TF_CONFIG``
(:mod:`~mirrortutor.clusters.program_worker`), and hands back a :class:`ClusterProgramRun`: each
worker's exit status, standard output, the tail of its standard error, the one line that says
what it raised, its seconds, and (``record=True``) the workers' traces merged into one
:class:`~mirrortutor.WorkerTraces`. Everything is read into memory before the cluster's temporary
folder goes, so the result outlives ``cluster.stop()``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ClusterConfigError, JobConfigError, ProgramError, WorkerIndexError
from ..record.records import Recording
from ..record.workers import WorkerTraces
from ..tables import text_table
from ..validate import whole_number

__all__ = ["ClusterProgramRun", "WorkerExit", "program_spec", "collect", "traceback_frames"]

STDERR_TAIL = 2000  # characters of each worker's standard error kept in the result


@dataclass
class WorkerExit:
    """How one worker's copy of the program ended."""

    worker: int  # its TF_CONFIG task index (worker 0 is the chief)
    exit_code: int | None  # what `python SCRIPT` exited with; -9: killed by SIGKILL
    stdout: str = ""  # everything the program printed
    stderr_tail: str = ""  # the last STDERR_TAIL characters of its standard error
    error: str = ""  # the exception it raised, on one line ("" if none, or killed)
    frames: list[str] = field(default_factory=list)  # its last traceback, "file:function" each
    seconds: float | None = None  # from the program's start to its end (None: killed)

    @property
    def killed(self) -> bool:
        """Killed by a signal (SIGKILL: ``run_program(kill_worker=...)``, or the launcher)."""
        return self.exit_code is not None and self.exit_code < 0

    @property
    def status(self) -> str:
        if self.killed:
            return f"killed ({signal.Signals(-self.exit_code).name})"
        return "finished" if self.exit_code == 0 else "failed"


@dataclass
class ClusterProgramRun:
    """Every worker's end of one run of a program, and (recorded) their merged traces."""

    script: str
    args: list[str]
    record: bool
    tf_configs: list[dict]
    workers: list[WorkerExit]
    seconds: float  # from launching the workers to the last one ending
    traces: WorkerTraces | None = None  # every worker's trace (None: not recorded, or a
    trace_of: dict = field(default_factory=dict)  # worker without one); worker -> its Trace

    @property
    def ok(self) -> bool:
        """Every worker's program ended with exit status 0."""
        return all(w.exit_code == 0 for w in self.workers)

    def trace(self, worker: int):
        """Worker ``worker``'s trace (recorded runs; a killed worker has none)."""
        if worker not in self.trace_of:
            raise ProgramError(
                f"Worker {worker} left no trace: " + ("it was run with record=False." if not
                self.record else "it was killed before it could write one (or never made a "
                "MultiWorkerMirroredStrategy). Read the other workers' traces."))
        return self.trace_of[worker]

    def summary(self) -> str:
        """One line per worker: its role, how it ended, and what it raised."""
        rows = [("worker", "role", "status", "exit", "what it raised")]
        for w in self.workers:
            rows.append((str(w.worker), "chief" if w.worker == 0 else "worker", w.status,
                         str(w.exit_code), w.error))
        return text_table(rows)


def program_spec(script, args, *, num_workers: int, replicas_per_worker: int,
                 kill_worker, at_step, record: bool, recording) -> dict:
    """Check the arguments of ``run_program`` and make the spec every worker receives."""
    path = Path(script)
    if not path.is_file() and not path.is_absolute() and (Path("..") / path).is_file():
        path = Path("..") / path  # the course's folder: notebooks run one level below it
    if not path.is_file():
        raise ProgramError(f"There is no program at {str(script)!r} (looked in {Path.cwd()}). "
                           "Give the path of a Python file: cluster.run_program('worker.py').")
    if replicas_per_worker != 1:
        raise ClusterConfigError(
            f"run_program runs the script as it is, and TensorFlow's MultiWorkerMirroredStrategy "
            f"gives a worker without GPUs one replica (its CPU), however many logical CPUs it "
            f"has; this cluster asks for replicas_per_worker={replicas_per_worker}. Make it "
            f"with mt.MultiWorkerCluster(workers={num_workers}) (one replica per worker).")
    if recording is not None and not isinstance(recording, Recording):
        raise ClusterConfigError(f"recording must be an mt.Recording, but got "
                                 f"{type(recording).__name__}.")
    kill_at = None
    if kill_worker is not None or at_step is not None:
        if not record:
            raise JobConfigError(
                "kill_worker/at_step need record=True: the worker is killed when its recording "
                "strategy reports that step (stock TensorFlow reports no steps).")
        whole_number(kill_worker, WorkerIndexError, f"Worker {kill_worker!r} does not exist: "
                     f"this cluster has workers 0 to {num_workers - 1}.", low=0,
                     high=num_workers - 1)
        kill_at = whole_number(at_step, JobConfigError, f"at_step must be the step (counting "
                               f"from 0) in which the worker is killed, but got {at_step!r}.",
                               low=0)
    return {"script": str(path.resolve()), "args": [str(a) for a in args], "record": bool(record),
            "cwd": os.getcwd(), "recording": dataclasses.asdict(recording) if recording else None,
            "kill_worker": kill_worker, "kill_at": kill_at}


def traceback_frames(stderr: str) -> list[str]:
    """The frames of the last Python traceback in ``stderr``, outermost first, each as
    ``"path:function"`` (the path from ``site-packages/`` on when it is under one): the whole
    stack, which the ``stderr_tail`` may cut."""
    last = stderr.rfind("Traceback (most recent call last):")
    if last < 0:
        return []
    frames = re.findall(r'^\s*File "([^"]+)", line \d+, in (\S+)', stderr[last:], re.MULTILINE)
    return [f"{path.split('site-packages/')[-1]}:{function}" for path, function in frames]


def _read(path: str) -> str:
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""


def collect(spec: dict, run_dir: str, tf_configs: list[dict], codes: list, seconds: float
            ) -> ClusterProgramRun:
    """Read what every worker left in ``run_dir`` (after the launcher said ``done``)."""
    workers, traces = [], {}
    for i, code in enumerate(codes):
        ended = json.loads(_read(os.path.join(run_dir, f"worker_{i}.json")) or "{}")
        stderr = _read(os.path.join(run_dir, f"worker_{i}.stderr"))
        workers.append(WorkerExit(
            worker=i, exit_code=code, stdout=_read(os.path.join(run_dir, f"worker_{i}.stdout")),
            stderr_tail=stderr[-STDERR_TAIL:], error=ended.get("error", ""),
            frames=traceback_frames(stderr), seconds=ended.get("seconds")))
        path = os.path.join(run_dir, f"trace-worker{i}-0.npz")
        if spec["record"] and os.path.exists(path):
            from ..record.trace import Trace

            traces[i] = Trace.load(path)
    merged = WorkerTraces([traces[i] for i in range(len(codes))]) if spec["record"] and len(
        traces) == len(codes) else None
    return ClusterProgramRun(spec["script"], spec["args"], spec["record"], tf_configs, workers,
                             seconds, merged, traces)
