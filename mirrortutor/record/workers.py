"""Every worker's trace of one multi-worker job, side by side: the whole cluster in one view.

A ``MultiWorkerMirroredStrategy`` runs once per worker, and each worker's trace holds only its own
replicas. ``python -m mirrortutor record`` writes one file per worker (``trace-worker0-0.npz``,
``trace-worker1-0.npz``, …); :meth:`WorkerTraces.load` reads them back and puts them together:
which examples each replica of each worker got, every replica's local gradient going into the
cross-worker all-reduce and the identical sum coming out on every worker, weights that never drift
apart, and one step timeline for the whole cluster. Replica numbers follow TensorFlow:
``replica_id_in_sync_group = worker × replicas_per_worker + local replica``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TraceFileError
from ..tables import text_table
from .trace import Trace

__all__ = ["WorkerTraces", "ranges"]


def ranges(ids) -> str:
    """[0, 1, 2, 3, 9] -> "0–3, 9": a shard's examples, readably."""
    ids = [int(i) for i in ids]
    if not ids:
        return "(none)"
    gaps = {b - a for a, b in zip(ids, ids[1:])}
    if len(ids) > 3 and len(gaps) == 1 and gaps != {1}:
        return f"{ids[0]}, {ids[1]}, …, {ids[-1]} (every {gaps.pop()}th)"
    parts, start = [], ids[0]
    for prev, cur in zip(ids, ids[1:] + [None]):
        if cur != prev + 1:
            parts.append(f"{start}" if start == prev else f"{start}–{prev}")
            start = cur
    return ", ".join(parts)


@dataclass
class WorkerTraces:
    """The traces of one job's workers, in worker order (``traces[w]`` is worker ``w``'s)."""

    traces: list[Trace]

    @classmethod
    def load(cls, source) -> "WorkerTraces":
        """Read the workers' trace files: a folder ``record`` wrote, or a list of paths. Each
        file says which worker wrote it; they are put in worker order."""
        paths = sorted(Path(source).glob("trace-worker*.npz")) if isinstance(
            source, (str, Path)) else [Path(p) for p in source]
        traces = [Trace.load(p) for p in paths]
        workers = [t.worker for t in traces]
        if not traces or None in workers or sorted(workers) != list(range(len(traces))):
            raise TraceFileError(
                f"Expected one trace per worker of a multi-worker job (workers 0, 1, …), but "
                f"{source} holds {len(traces)} file(s) from workers {workers}. Give the folder "
                "`python -m mirrortutor record --out DIR` wrote in every worker, or their paths.")
        return cls([t for _, t in sorted(zip(workers, traces), key=lambda p: p[0])])

    def replicas(self, worker: int) -> int:
        """How many replicas worker ``worker`` has (its shards, else its variables' copies)."""
        trace = self.traces[worker]
        shards = trace.shards(trace.steps[0]) if trace.steps else []
        return len(shards) or max((len(v.devices) for v in trace.variables), default=0)

    def shard_table(self, step: int = 0) -> str:
        """Which examples every replica of every worker received in ``step``."""
        rows = [("worker", "local replica", "replica_id_in_sync_group", "device", "examples")]
        for w, trace in enumerate(self.traces):
            devices = {s.replica_id: s.device for s in trace.shards(step)}
            for rid, ids in sorted(trace.example_ids(step).items()):
                rows.append((str(w), str(rid), str(w * self.replicas(w) + rid),
                             devices.get(rid, "?").split("/", 2)[-1], ranges(ids)))
        return text_table(rows)

    def allreduce_table(self, step: int = 0, digits: int = 4) -> str:
        """Every replica's local gradient norm into the all-reduce, and the sum out, per worker."""
        rows = [("variable", "worker", "local gradients ‖g‖ per replica", "all-reduced ‖Σg‖")]
        per_worker = [t.gradients(step) for t in self.traces]
        names = list(dict.fromkeys(g.variable for gs in per_worker for g in gs))
        for name in names:
            for w, gs in enumerate(per_worker):
                mine = [g for g in gs if g.variable == name]
                if mine:
                    rows.append((name, str(w), " ".join(f"{g.norm:.{digits}g}" for g in mine),
                                 f"{mine[0].reduced_norm:.{digits}g}"))
        return text_table(rows)

    def allreduce_error(self, step: int = 0) -> float:
        """Largest |Σ over all workers' replicas of the local gradients − the all-reduced one|.

        The cross-worker all-reduce should return exactly the sum of every replica's input in
        the cluster (up to float rounding): this checks it from the workers' own records.
        """
        sums: dict[str, np.ndarray] = {}
        for trace in self.traces:
            for g in trace.gradients(step):
                sums[g.variable] = sums.get(g.variable, 0) + g.value.astype(np.float64)
        reduced = [t.reduced_gradients(step) for t in self.traces]
        return max((float(np.max(np.abs(red[name] - total)))
                    for name, total in sums.items() for red in reduced), default=0.0)

    def sync_table(self) -> str:
        """After each recorded step: how far replicas drift within a worker, and across workers.

        "n/a" where there was nothing to compare: within a worker of one replica (a copy against
        itself), or across workers when the copies were not kept (``Recording(full_values=False)``,
        or large tensors) or there is one worker.
        """
        rows = [("step", "largest difference within a worker", "largest difference across workers")]
        for step in self.traces[0].steps if self.traces else []:
            records = [s for t in self.traces for s in t.sync(step)]
            compared = [s.max_abs_diff for s in records if s.values is None or len(s.values) > 1]
            across: list[float] = []
            first = {s.name: s.values for s in self.traces[0].sync(step)}
            for t in self.traces[1:]:
                for s in t.sync(step):
                    if s.values is not None and first.get(s.name) is not None:
                        across.append(float(np.max(np.abs(s.values[0] - first[s.name][0]))))
            rows.append((str(step), f"{max(compared):g}" if compared else "n/a",
                         f"{max(across):g}" if across else "n/a"))
        return text_table(rows)

    def warnings(self) -> list[str]:
        """What the workers' strategies warned about (each message once)."""
        return list(dict.fromkeys(w for t in self.traces for w in t.warnings))
