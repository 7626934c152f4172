"""The kernel's watch over a process-mode cluster: lost tasks become plain errors, never hangs.

TensorFlow's ``ClusterCoordinator`` treats a dead worker as a preemption: the worker's steps go back
in the queue and wait up to an hour (``_WORKER_MAXIMUM_RECOVERY_SEC``) for it to come back. With one
worker of several dead that is what chapter 07b shows (the others carry on). With *every* worker
dead, ``join()`` would wait for that hour with no word. And a dead parameter server takes the
variables it held with it, which TensorFlow reports in raw gRPC words.

:class:`TaskWatch` looks at the task processes twice a second (their pids come from the cluster's
agent) and turns both into a :class:`~mirrortutor.errors.ClusterFailureError` that ``join()`` (or
the next ``schedule()``) raises, the way TensorFlow raises a step's own error:

- a ps process died: at once, naming the ps and what is lost with it;
- every worker dead for ``recovery_timeout`` seconds while steps wait: naming the workers and
  the fix (``restart_worker``, or a new cluster).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

from ..errors import ClusterFailureError
from ..record.tf_internals.cluster import fail_pending_steps, live_coordinators, pending_steps
from .processes import alive

#: Seconds between two looks at the task processes.
INTERVAL = 0.5


def ps_lost_message(lost: list[int], num_ps: int) -> str:
    names = ", ".join(f"ps {i}" for i in lost)
    return (f"{names} of this cluster died (its process ended). A parameter server holds the "
            f"variables placed on it, so they are lost with it: training cannot go on, and "
            f"TensorFlow cannot bring them back (a real job restarts every task from its last "
            f"checkpoint). Leave the `with` block (or call cluster.stop()) and start a new "
            f"mt.LocalCluster. The results of the steps that ended before are still here "
            f"(TensorFlow copied each to this kernel), and so is a recording strategy's trace.")


def workers_lost_message(num_workers: int, seconds: float) -> str:
    return (f"Every worker of this cluster (workers 0 to {num_workers - 1}) has been dead for "
            f"{seconds:.0f} s, so the steps still scheduled cannot run: they were cancelled. "
            f"TensorFlow itself would wait up to an hour for a worker to return. Restart one with "
            f"cluster.restart_worker(0) and schedule the steps again, or start a new cluster.")


def _every(coordinator) -> list:
    """The cluster's own coordinator and every other one the program made for it (only one
    cluster runs in a kernel at a time)."""
    return [coordinator] + [c for c in live_coordinators() if c is not coordinator]


class TaskWatch:
    """Watches one running :class:`~mirrortutor.clusters.ps.LocalCluster` from a daemon thread."""

    def __init__(self, cluster, recovery_timeout: float):
        self.cluster = cluster
        self.recovery_timeout = recovery_timeout
        self.lost_ps: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mirrortutor-task-watch",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        dead_since = None
        while not self._stop.wait(INTERVAL):
            coordinator, pids = self.cluster.coordinator, self.cluster.pids
            if coordinator is None:
                return
            lost = [i for i, pid in enumerate(pids["ps"]) if not alive(pid)]
            if lost and not self.lost_ps:
                self.lost_ps = lost
                message = ps_lost_message(lost, len(pids["ps"]))
                for each in _every(coordinator):
                    fail_pending_steps(each, ClusterFailureError(message), only_if_pending=False)
            if any(alive(pid) for pid in pids["worker"]):
                dead_since = None
                continue
            now = time.monotonic()
            dead_since = dead_since or now
            if now - dead_since >= self.recovery_timeout:
                message = workers_lost_message(len(pids["worker"]), now - dead_since)
                for each in _every(coordinator):
                    if pending_steps(each):
                        fail_pending_steps(each, ClusterFailureError(message))
                dead_since = now  # and again, if steps are scheduled anew


class CoordinatorLog(logging.Filter):
    """What TensorFlow's coordinator says about failed workers, kept instead of printed.

    Its threads log "Worker ... failed with UnavailableError ..." whenever they notice, which can
    be cells later than the failure it is about. The lines are kept, in order, in ``messages``
    (``cluster.coordinator_log``), for the notebook to show where it chooses.
    """

    def __init__(self, limit: int = 200):
        super().__init__()
        self.messages: list[str] = []
        self._limit = limit  # a long-lived kernel keeps at most this many

    def filter(self, record: logging.LogRecord) -> bool:
        if "coordinator" not in record.pathname:
            return True
        if len(self.messages) < self._limit:
            self.messages.append(record.getMessage().split("\n", 1)[0])
        return False


#: One for the kernel: TensorFlow's coordinator threads outlive every cluster.
COORDINATOR_LOG = CoordinatorLog()
logging.getLogger("tensorflow").addFilter(COORDINATOR_LOG)

#: Coordinator threads of clusters already stopped (see :func:`quiet_after_stop`).
_STOPPED: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
_before: list = []  # the thread-error hook that was in place before ours


def _keep_stopped_threads_errors(args) -> None:
    """A stopped cluster's coordinator thread that fails (its closure's task was just killed)
    has its error kept in the coordinator log, not printed into whichever cell runs next."""
    if args.thread in _STOPPED:
        COORDINATOR_LOG.messages.append(
            f"{args.thread.name} after stop(): {args.exc_type.__name__}: "
            f"{str(args.exc_value).splitlines()[0] if str(args.exc_value) else ''}")
        return
    (_before[0] if _before else threading.__excepthook__)(args)


def quiet_after_stop() -> None:
    """Before a cluster's tasks are stopped: its coordinator's closure threads, still finishing
    what they ran, will fail once the tasks are gone; keep those errors in the log."""
    _STOPPED.update(t for t in threading.enumerate()
                    if t.name.startswith("WorkerClosureProcessingLoop"))
    if threading.excepthook is not _keep_stopped_threads_errors:
        _before[:] = [threading.excepthook]
        threading.excepthook = _keep_stopped_threads_errors
