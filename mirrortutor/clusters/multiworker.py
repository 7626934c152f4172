"""``mt.MultiWorkerCluster``: several worker processes on this machine, one plain TF program.

>>> with mt.MultiWorkerCluster(workers=2) as cluster:   # doctest: +SKIP
...     run = cluster.run_program("programs/08_worker.py", "--data", "train.npz")
...     run.ok
True

Each :meth:`MultiWorkerCluster.run_program` starts one OS process per worker, each with its own
``TF_CONFIG`` (made by :func:`tf_config`, the same template a real cluster uses), each running the
script unchanged (:mod:`mirrortutor.clusters.program_worker`). The notebook's kernel is *not* a
worker: it never joins the cluster, it only launches the workers and reads what they leave
(:class:`~mirrortutor.clusters.program_run.ClusterProgramRun`) in a temporary directory deleted
when the ``with`` block ends; a small janitor process deletes it too if the kernel dies first, even
by SIGKILL; ``debug=True`` keeps it. :meth:`~MultiWorkerCluster.submit_program` starts a run and
returns at once (a :class:`RunningProgram`).

**Who can reach the ports.** TensorFlow's gRPC servers listen on every interface. On Linux the
workers run under ``unshare -rn``, in a private network namespace with only a loopback, so they
reach each other at ``localhost:12345``, ``localhost:12346``, … and nothing outside the namespace
can reach them (not even this machine's own addresses). Where that is impossible they run on free
host ports and :class:`~mirrortutor.ExposedPortWarning` says so.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings

from ..errors import ClusterConfigError, ClusterStateError, ExposedPortWarning
from ..validate import whole_number
from ..record.records import Recording
from .tfconfig import tf_config
from .processes import Janitor, Supervisor, containment, free_ports
from .program_run import ClusterProgramRun, collect, program_spec

#: The first worker's port inside the private network namespace (nothing else listens there).
BASE_PORT = 12345
MAX_WORKERS = 4  # every worker imports TensorFlow (~600 MB) and shares this machine's cores
MAX_REPLICAS_PER_WORKER = 8


class RunningProgram:
    """A program whose workers are running; :meth:`wait` returns its
    :class:`~mirrortutor.clusters.program_run.ClusterProgramRun`."""

    def __init__(self, cluster: "MultiWorkerCluster", spec: dict, run_dir: str,
                 tf_configs: list[dict], launcher: Supervisor):
        self.spec, self.run_dir, self.tf_configs = spec, run_dir, tf_configs
        self._cluster, self._launcher = cluster, launcher
        self._t0 = time.monotonic()
        line = launcher.expect("started", "start the program's workers",
                               "Run mt.MultiWorkerCluster(..., debug=True) to see why.")
        self.pids: list[int] = json.loads(line.split(maxsplit=1)[1])  # worker pids, in order
        self._result: ClusterProgramRun | None = None

    def wait(self) -> ClusterProgramRun:
        """Wait for every worker to end, then read what each one left."""
        if self._result is None:
            try:
                line = self._launcher.read_line().split(maxsplit=1)
            finally:
                self._finish()  # returns once every worker is gone
            codes = (json.loads(line[1]) if line[:1] == ["done"]
                     else [None] * len(self.tf_configs))
            self._result = collect(self.spec, self.run_dir, self.tf_configs, codes,
                                   time.monotonic() - self._t0)
        return self._result

    def _finish(self) -> None:
        """Stop the launcher and wait for it; it ends only after every process it started (a
        running program's workers are killed first)."""
        self._launcher.stop()
        self._cluster._running.discard(self)


class MultiWorkerCluster:
    """``workers`` worker processes with ``replicas_per_worker`` replicas each, on this machine.

    ``contain``: ``None`` puts the workers in a private network namespace when Linux allows,
    ``True`` insists (error if impossible), ``False`` runs them on host ports (with a warning).
    ``timeout``: seconds a run may take before every worker is killed. ``grace``: seconds the
    other workers get to report their own failure after one worker dies. ``debug``: TF's log lines
    go to the worker logs either way (``run.logs``); debug also keeps the temporary directory.
    """

    def __init__(self, workers: int = 2, replicas_per_worker: int = 1, *,
                 contain: bool | None = None, timeout: float = 180.0, grace: float = 30.0,
                 debug: bool = False):
        self.num_workers = whole_number(
            workers, ClusterConfigError, f"workers must be a whole number from 1 to {MAX_WORKERS}, "
            f"but got {workers!r}. A multi-worker cluster needs at least one worker: "
            "mt.MultiWorkerCluster(workers=2), for example.", high=MAX_WORKERS)
        self.replicas_per_worker = whole_number(
            replicas_per_worker, ClusterConfigError, f"replicas_per_worker must be a whole number "
            f"from 1 to {MAX_REPLICAS_PER_WORKER}, but got {replicas_per_worker!r}. Each worker "
            "needs at least one replica (a logical CPU): replicas_per_worker=2, for example.",
            high=MAX_REPLICAS_PER_WORKER)
        self.contained = containment(contain, "workers")
        self.timeout, self.grace, self.debug = float(timeout), float(grace), debug
        self.directory: str | None = None  # the temporary directory of runs and checkpoints
        self._janitor: Janitor | None = None  # deletes it if the kernel dies first
        self._runs = 0
        self._running: set[RunningProgram] = set()

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas in every all-reduce: workers × replicas per worker."""
        return self.num_workers * self.replicas_per_worker

    def __enter__(self) -> "MultiWorkerCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "MultiWorkerCluster":
        """Make the temporary directory; workers start with each :meth:`run_program`."""
        if self.directory is not None:
            raise ClusterStateError("This MultiWorkerCluster is already started; use it, or "
                                    "stop() it first.")
        self.directory = tempfile.mkdtemp(prefix="mirrortutor-mw-")
        self._janitor = None if self.debug else Janitor(self.directory)
        return self

    def stop(self) -> None:
        """Kill any running workers, wait until every process of this cluster is gone, then delete
        the temporary directory (so no late write re-creates it). Safe to call twice."""
        for running in list(self._running):
            running._finish()
        if self._janitor is not None:
            self._janitor.done()  # deletes the directory
        self._janitor = self.directory = None

    def _need_started(self) -> None:
        if self.directory is None:
            raise ClusterStateError(
                "This MultiWorkerCluster is not started. Use it in a `with "
                "mt.MultiWorkerCluster(...) as cluster:` block (or call start() first).")

    def addresses(self) -> list[str]:
        """The workers' ``host:port`` addresses, as their TF_CONFIG lists them (contained runs)."""
        return [f"localhost:{BASE_PORT + i}" for i in range(self.num_workers)]

    def tf_configs(self, addresses: list[str] | None = None) -> list[dict]:
        """Every worker's TF_CONFIG: :func:`tf_config` with this cluster's addresses."""
        addresses = addresses or self.addresses()
        return [tf_config(addresses, i) for i in range(self.num_workers)]

    def _new_run_dir(self) -> str:
        self._runs += 1
        run_dir = os.path.join(self.directory, f"run_{self._runs}")
        os.makedirs(run_dir)
        return run_dir

    def _launch(self, run_dir: str, program: dict) -> tuple[list[dict], Supervisor]:
        """Start the launcher of one run: every worker's TF_CONFIG, and its supervisor."""
        if self.contained:
            configs = self.tf_configs()
        else:
            configs = self.tf_configs([f"localhost:{p}" for p in free_ports(self.num_workers)])
            warnings.warn(ExposedPortWarning(
                "This machine cannot make a private network namespace, so the workers' gRPC "
                "ports listen on every interface of this machine while the program runs, and run "
                "any TensorFlow op for whoever connects. On a shared machine, keep them behind a "
                "firewall."), stacklevel=4)
        launch = {"run_dir": run_dir, "tf_configs": configs, "netns": self.contained,
                  "python": sys.executable, "timeout": self.timeout, "grace": self.grace,
                  "program": program}
        return configs, Supervisor("mirrortutor.clusters.launcher", [json.dumps(launch)],
                                   contained=self.contained, what="the worker launcher")

    def submit_program(self, script, *args, kill_worker: int | None = None,
                       at_step: int | None = None, record: bool = True,
                       recording: Recording | None = None) -> RunningProgram:
        """Start ``script`` in every worker process and return at once (see :meth:`run_program`);
        ``.wait()`` on the result waits for the workers and returns what :meth:`run_program`
        returns, and :meth:`stop` kills them if they still run."""
        self._need_started()
        spec = program_spec(script, args, num_workers=self.num_workers,
                            replicas_per_worker=self.replicas_per_worker, kill_worker=kill_worker,
                            at_step=at_step, record=record, recording=recording)
        run_dir = self._new_run_dir()
        configs, launcher = self._launch(run_dir, spec)
        running = RunningProgram(self, spec, run_dir, configs, launcher)
        self._running.add(running)
        return running

    def run_program(self, script, *args, kill_worker: int | None = None,
                    at_step: int | None = None, record: bool = True,
                    recording: Recording | None = None) -> ClusterProgramRun:
        """Run ``script`` (plain TensorFlow, unchanged) in every worker process, each with its
        ``TF_CONFIG``, as ``python SCRIPT ARGS`` would; wait; return how each ended.

        ``record=True``: under mirrortutor's recording strategies (``python -m mirrortutor
        record``; the traces come back merged), ``False``: stock TensorFlow. ``kill_worker`` /
        ``at_step``: that worker is killed (SIGKILL) in step ``at_step`` (from 0), when its
        recording reports that step (:mod:`~mirrortutor.clusters.program_worker`); the program
        is not changed.
        """
        return self.submit_program(script, *args, kill_worker=kill_worker, at_step=at_step,
                                   record=record, recording=recording).wait()

    def __repr__(self) -> str:
        state = "started" if self.directory else "stopped"
        return (f"<MultiWorkerCluster {self.num_workers} worker(s) × {self.replicas_per_worker} "
                f"replica(s), {'contained' if self.contained else 'uncontained'}, {state}>")


__all__ = ["MultiWorkerCluster", "RunningProgram", "tf_config", "BASE_PORT"]
