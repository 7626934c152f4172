"""``mt.MultiWorkerCluster``: several worker processes on this machine, one synchronous job.

>>> with mt.MultiWorkerCluster(workers=2, replicas_per_worker=2) as cluster:   # doctest: +SKIP
...     run = cluster.run(mt.TrainingJob(steps=16))
...     run.weights_identical()
True

Each :meth:`MultiWorkerCluster.run` starts one OS process per worker, each with its own
``TF_CONFIG`` (made by :func:`tf_config`, the same template a real cluster uses), each running
:mod:`mirrortutor.clusters.worker` under ``mt.MultiWorkerMirroredStrategy``. The notebook's kernel is
*not* a worker: it never joins the cluster, it only launches the workers and reads the results
they write (:class:`~mirrortutor.training.job.WorkerResult` files in mirrortutor's trace format,
in a temporary directory deleted when the ``with`` block ends, checkpoints included; a small janitor
process deletes it too if the kernel dies first, even by SIGKILL; ``debug=True`` keeps it).

**Who can reach the ports.** TensorFlow's gRPC servers listen on every interface. On Linux the
workers run under ``unshare -rn``, in a private network namespace with only a loopback, so they
reach each other at ``localhost:12345``, ``localhost:12346``, … and nothing outside the namespace
can reach them (not even this machine's own addresses). Where that is impossible they run on free
host ports and :class:`~mirrortutor.ExposedPortWarning` says so.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings

from ..errors import (BatchSplitError, ClusterConfigError, ClusterStateError, ExposedPortWarning,
                      JobConfigError, WorkerIndexError)
from ..progress import progress
from ..training.job import TrainingJob, WorkerResult, job_dict
from ..training.merged import MultiWorkerRun
from ..validate import whole_number
from ..record.records import Recording
from .tfconfig import tf_config
from .processes import Janitor, Supervisor, containment, free_ports
from .program_run import ClusterProgramRun, collect, program_spec
from .worker import progress_file, result_file

#: The first worker's port inside the private network namespace (nothing else listens there).
BASE_PORT = 12345
MAX_WORKERS = 4  # every worker imports TensorFlow (~600 MB) and shares this machine's cores
MAX_REPLICAS_PER_WORKER = 8


class RunningJob:
    """A job whose workers are running; :meth:`wait` returns its :class:`MultiWorkerRun`."""

    def __init__(self, cluster: "MultiWorkerCluster", job: TrainingJob, run_dir: str,
                 tf_configs: list[dict], launcher: Supervisor, kill: dict):
        self.job, self.run_dir, self.tf_configs = job, run_dir, tf_configs
        self._cluster, self._launcher, self._kill = cluster, launcher, kill
        self._t0 = time.monotonic()
        line = launcher.expect("started", "start the job's workers",
                               "Run mt.MultiWorkerCluster(..., debug=True) to see why.")
        self.pids: list[int] = json.loads(line.split(maxsplit=1)[1])  # worker pids, in order
        self._result: MultiWorkerRun | None = None

    def wait(self) -> MultiWorkerRun:
        """Wait for every worker to end, then read what each one reported."""
        if self._result is not None:
            return self._result
        said: list[str] = []  # the launcher's "done [codes]", read while the bar follows worker 0
        reader = threading.Thread(target=lambda: said.append(self._launcher.read_line()),
                                  daemon=True)
        reader.start()
        with progress(self.job.steps, f"training on {len(self.tf_configs)} workers",
                      unit="step") as bar:
            while reader.is_alive():
                reader.join(0.2)
                bar.n = min(self._steps_done(), bar.total)
                bar.refresh()
        line = (said[0] if said else "").split(maxsplit=1)
        codes = json.loads(line[1]) if line[:1] == ["done"] else [None] * len(self.tf_configs)
        self._finish()
        results = []
        for i, code in enumerate(codes):
            path = os.path.join(self.run_dir, result_file(i))
            if os.path.exists(path):
                result = WorkerResult.load(path)
            else:
                result = WorkerResult(worker=i, status="killed", tf_config=self.tf_configs[i])
            result.exit_code = code
            results.append(result)
        logs = [self._log(i) for i in range(len(codes))]
        self._result = MultiWorkerRun(self.job, results, self.tf_configs, logs,
                                      time.monotonic() - self._t0, self._kill)
        return self._result

    def _steps_done(self) -> int:
        """Steps of the job worker 0 has done so far (its progress file), 0 before the first."""
        try:
            with open(os.path.join(self.run_dir, progress_file(0))) as f:
                return int(f.read() or 0)
        except (OSError, ValueError):
            return 0

    def _log(self, i: int) -> str:
        path = os.path.join(self.run_dir, f"worker_{i}.log")
        return open(path, errors="replace").read() if os.path.exists(path) else ""

    def _finish(self) -> None:
        """Stop the launcher and wait for it; it ends only after every process it started (a
        running job's workers are killed first)."""
        self._launcher.stop()
        self._cluster._running.discard(self)


class MultiWorkerCluster:
    """``workers`` worker processes with ``replicas_per_worker`` replicas each, on this machine.

    ``contain``: ``None`` puts the workers in a private network namespace when Linux allows,
    ``True`` insists (error if impossible), ``False`` runs them on host ports (with a warning).
    ``timeout``: seconds a job may take before every worker is killed. ``grace``: seconds the
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
        self._running: set[RunningJob] = set()

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas in every all-reduce: workers × replicas per worker."""
        return self.num_workers * self.replicas_per_worker

    @property
    def checkpoint_dir(self) -> str:
        """Where the chief writes checkpoints (kept between runs, deleted with the cluster)."""
        self._need_started()
        return os.path.join(self.directory, "checkpoints")

    def __enter__(self) -> "MultiWorkerCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "MultiWorkerCluster":
        """Make the temporary directory; workers start with each :meth:`run`."""
        if self.directory is not None:
            raise ClusterStateError("This MultiWorkerCluster is already started; use it, or "
                                    "stop() it first.")
        self.directory = tempfile.mkdtemp(prefix="mirrortutor-mw-")
        self._janitor = None if self.debug else Janitor(self.directory)
        return self

    def stop(self) -> None:
        """Kill any running workers, wait until every process of this cluster is gone, then delete
        the temporary directory (so no late write re-creates it). Safe to call twice."""
        for job in list(self._running):
            job._finish()
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

    def submit(self, job: TrainingJob | None = None, *, resume: bool = False,
               kill_worker: int | None = None, at_step: int | None = None) -> RunningJob:
        """Start ``job`` on every worker and return at once (see :meth:`run`)."""
        self._need_started()
        job = job or TrainingJob()
        if not isinstance(job, TrainingJob):
            raise JobConfigError(f"job must be an mt.TrainingJob, but got {type(job).__name__}.")
        if job.global_batch_size % self.num_replicas_in_sync:
            raise BatchSplitError(
                f"global_batch_size={job.global_batch_size} does not divide among "
                f"{self.num_replicas_in_sync} replicas ({self.num_workers} workers × "
                f"{self.replicas_per_worker}). Use a multiple of {self.num_replicas_in_sync}.")
        kill = {}
        if kill_worker is not None:
            whole_number(kill_worker, WorkerIndexError, f"Worker {kill_worker!r} does not exist: "
                         f"this cluster has workers 0 to {self.num_workers - 1}.", low=0,
                         high=self.num_workers - 1)
            whole_number(at_step, JobConfigError, f"at_step must be a step of the job, 0 to "
                         f"{job.steps - 1}, but got {at_step!r}.", low=0, high=job.steps - 1)
            kill = {str(kill_worker): at_step}
        ckpt = self.checkpoint_dir
        if not resume:
            shutil.rmtree(ckpt, ignore_errors=True)
        run_dir = self._new_run_dir()
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump({"job": job_dict(job), "replicas_per_worker": self.replicas_per_worker,
                       "checkpoint_dir": ckpt if job.checkpoint_every or resume else None,
                       "kill": kill}, f)
        configs, launcher = self._launch(run_dir)
        running = RunningJob(self, job, run_dir, configs, launcher, kill)
        self._running.add(running)
        return running

    def _new_run_dir(self) -> str:
        self._runs += 1
        run_dir = os.path.join(self.directory, f"run_{self._runs}")
        os.makedirs(run_dir)
        return run_dir

    def _launch(self, run_dir: str, program: dict | None = None) -> tuple[list[dict], Supervisor]:
        """Start the launcher of one run: every worker's TF_CONFIG, and its supervisor."""
        if self.contained:
            configs = self.tf_configs()
        else:
            configs = self.tf_configs([f"localhost:{p}" for p in free_ports(self.num_workers)])
            warnings.warn(ExposedPortWarning(
                "This machine cannot make a private network namespace, so the workers' gRPC "
                "ports listen on every interface of this machine while the job runs, and run "
                "any TensorFlow op for whoever connects. On a shared machine, keep them behind a "
                "firewall."), stacklevel=4)
        launch = {"run_dir": run_dir, "tf_configs": configs, "netns": self.contained,
                  "python": sys.executable, "timeout": self.timeout, "grace": self.grace,
                  "program": program}
        return configs, Supervisor("mirrortutor.clusters.launcher", [json.dumps(launch)],
                                   contained=self.contained, what="the worker launcher")

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
        self._need_started()
        spec = program_spec(script, args, num_workers=self.num_workers,
                            replicas_per_worker=self.replicas_per_worker, kill_worker=kill_worker,
                            at_step=at_step, record=record, recording=recording)
        run_dir = self._new_run_dir()
        t0 = time.monotonic()
        configs, launcher = self._launch(run_dir, spec)
        try:
            launcher.expect("started", "start the program's workers",
                            "Run mt.MultiWorkerCluster(..., debug=True) to see why.")
            line = launcher.read_line().split(maxsplit=1)
        finally:
            launcher.stop()  # returns once every worker is gone
        codes = json.loads(line[1]) if line[:1] == ["done"] else [None] * self.num_workers
        return collect(spec, run_dir, configs, codes, time.monotonic() - t0)

    def run(self, job: TrainingJob | None = None, *, resume: bool = False,
            kill_worker: int | None = None, at_step: int | None = None) -> MultiWorkerRun:
        """Run ``job`` on every worker, wait, and return the merged :class:`MultiWorkerRun`.

        ``resume=True`` keeps the checkpoints of earlier runs and continues from the latest;
        otherwise they are deleted first. ``kill_worker``/``at_step``: that worker's process is
        killed (SIGKILL) just before that step, as a crash or a preemption would.
        """
        return self.submit(job, resume=resume, kill_worker=kill_worker, at_step=at_step).wait()

    def __repr__(self) -> str:
        state = "started" if self.directory else "stopped"
        return (f"<MultiWorkerCluster {self.num_workers} worker(s) × {self.replicas_per_worker} "
                f"replica(s), {'contained' if self.contained else 'uncontained'}, {state}>")


__all__ = ["MultiWorkerCluster", "RunningJob", "tf_config", "BASE_PORT"]
