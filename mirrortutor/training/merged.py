"""``mt.MultiWorkerRun``: every worker's report of one job, merged into one view.

Each worker's trace sees only its own replicas. Put side by side they show the whole cluster: which
examples each replica of each worker got, every replica's local gradient going into the
cross-worker all-reduce and the identical sum coming out on every worker, and weights that never
drift apart. Replica numbers follow TensorFlow: ``replica_id_in_sync_group = worker ×
replicas_per_worker + local replica``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..record import persist
from ..record.trace import Trace
from ..record.workers import WorkerTraces
from ..tables import text_table
from .job import TrainingJob, WorkerResult


@dataclass
class MultiWorkerRun:
    """What a :class:`~mirrortutor.MultiWorkerCluster` job did, worker by worker."""

    job: TrainingJob  # what every worker trained
    results: list[WorkerResult]  # one per worker, in worker order
    tf_configs: list[dict]  # the TF_CONFIG each worker ran with
    logs: list[str]  # each worker's stdout and stderr (TensorFlow's log lines included)
    seconds: float  # wall time from launching the workers to the last one ending
    kill: dict[str, int]  # {"worker index": step} of a deliberate kill, or {}

    # ---- the whole job -------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """Whether every worker finished every step."""
        return all(r.status == "finished" for r in self.results)

    @property
    def losses(self) -> list[float]:
        """The global loss of each step run (every worker computes the same all-reduced one)."""
        return list(self.results[0].losses)

    @property
    def weights(self) -> list[np.ndarray]:
        """The chief's final weights (when the job finished, every worker has the same)."""
        chief = next((r for r in self.results if r.is_chief and r.weights), self.results[0])
        return list(chief.weights)

    def trace(self, worker: int) -> Trace:
        """Worker ``worker``'s own trace: its replicas only."""
        return self.results[worker].trace

    def max_weight_difference(self) -> float:
        """Largest |weight on worker k − weight on worker 0| over workers and elements."""
        done = [r for r in self.results if r.weights]
        if len(done) < 2:
            return float("nan")
        return max(float(np.max(np.abs(a - b))) for r in done[1:]
                   for a, b in zip(r.weights, done[0].weights))

    def weights_identical(self) -> bool:
        """True when every worker finished with bit-for-bit the same weights."""
        return self.finished and self.max_weight_difference() == 0.0

    # ---- tables --------------------------------------------------------------------------------
    def summary(self) -> str:
        """One line per worker: role, fate, steps, exit code, and its error if it failed."""
        rows = [("worker", "role", "status", "steps", "exit", "replicas", "what it said")]
        for r in self.results:
            steps = (f"{r.first_step}–{r.first_step + r.steps_done - 1}" if r.steps_done
                     else "none")
            code = {None: "?", -9: "-9 (SIGKILL)"}.get(r.exit_code, str(r.exit_code))
            said = r.error or (f"resumed from {r.restored_from}" if r.restored_from else "")
            if r.status == "killed":
                said = "nothing: killed before it could report"
            rows.append((str(r.worker), "chief" if r.is_chief else "worker", r.status, steps,
                         code, str(len(r.devices)) if r.devices else "?", said))
        return text_table(rows)

    def workers(self) -> WorkerTraces:
        """The workers' traces side by side (:class:`~mirrortutor.record.workers.WorkerTraces`)."""
        return WorkerTraces([r.trace for r in self.results if r.trace is not None])

    def shard_table(self, step: int = 0) -> str:
        """Which examples every replica of every worker received in ``step``."""
        return self.workers().shard_table(step)

    def allreduce_table(self, step: int = 0, digits: int = 4) -> str:
        """Every replica's local gradient norm into the all-reduce, and the sum out, per worker."""
        return self.workers().allreduce_table(step, digits)

    def allreduce_error(self, step: int = 0) -> float:
        """Largest |Σ of every replica's local gradient − the all-reduced one| (see
        :meth:`WorkerTraces.allreduce_error <mirrortutor.record.workers.WorkerTraces.allreduce_error>`)."""
        return self.workers().allreduce_error(step)

    def sync_table(self) -> str:
        """After each recorded step: how far replicas drift within a worker, and across workers."""
        return self.workers().sync_table()

    def warnings(self) -> list[str]:
        """What the workers' strategies warned about (each message once)."""
        return self.workers().warnings()

    # ---- files ---------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write the whole run (job, every worker's result and trace, logs) to one file, in
        mirrortutor's file format (:mod:`mirrortutor.record.persist`, as
        ``mirrortutor-multiworker-run``); :meth:`load` reads it on any machine."""
        persist.write(path, "multiworker-run", self)

    @classmethod
    def load(cls, path) -> "MultiWorkerRun":
        """Read a run written by :meth:`save`: every table and trace works as before."""
        return persist.read(path, "multiworker-run", {"MultiWorkerRun": cls,
                                                      "WorkerResult": WorkerResult,
                                                      "TrainingJob": TrainingJob})

    def __repr__(self) -> str:
        state = "finished" if self.finished else "failed"
        return (f"<MultiWorkerRun {len(self.results)} worker(s), {state}, "
                f"{len(self.losses)} step(s) on worker 0>")
