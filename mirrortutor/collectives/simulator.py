"""The machinery under :mod:`mirrortutor.collectives.allreduce`: per-rank buffers, messages, steps.

A :class:`Simulator` keeps one flat numpy buffer per rank and runs rounds of messages between them;
the algorithms in :mod:`~mirrortutor.collectives.allreduce` only say which slices move where. The
records (:class:`Transfer`, :class:`Step`, :class:`AllReduceResult`, :class:`ClosedForm`) are what a
student steps through. Numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import (ChunkCountError, PerReplicaValuesError, ReplicaCountError,
                      ShapeMismatchError, UnknownAlgorithmError, UnknownReduceOpError,
                      UnsupportedDtypeError)
from ..validate import is_whole, whole_number

__all__ = ["ALGORITHMS", "REDUCE_OPS", "AllReduceResult", "ClosedForm", "Simulator", "Step",
           "Transfer", "as_arrays", "check_algorithm", "check_num_ranks", "check_values",
           "chunk_bounds", "chunk_move", "run_move"]

ALGORITHMS = ("reduce_to_one", "ring", "halving_doubling")
REDUCE_OPS = ("sum", "mean")


@dataclass(frozen=True)
class Transfer:
    """One message: a slice of the sender's buffer lands in the receiver's buffer."""

    src: int  # rank that sends
    dst: int  # rank that receives
    chunk: int | None  # index of the one chunk moved; None for a whole tensor or several chunks
    start: int  # offset of the first element moved, in the flattened tensor
    elements: int  # elements moved (0 when the tensor has fewer elements than chunks)
    bytes: int  # elements * itemsize
    kind: str  # "reduce": receiver adds into its buffer; "copy": receiver overwrites


@dataclass(frozen=True)
class Step:
    """One round of transfers that happen at the same time."""

    index: int  # 0-based position in the schedule
    phase: str  # "gather", "broadcast", "reduce-scatter", "all-gather", "fold" or "unfold"
    transfers: list[Transfer]  # every message of this round
    buffers: list[np.ndarray] | None = None  # (num_ranks, size) flat sums after it; if record=True


@dataclass
class AllReduceResult:
    """What a simulated all-reduce produced, and the schedule that produced it."""

    algorithm: str  # one of ALGORITHMS
    op: str  # "sum" or "mean"
    values: list[np.ndarray]  # the final value on every rank, in the input's shape
    steps: list[Step]  # the schedule, in order

    @property
    def num_ranks(self) -> int:
        """How many ranks took part (``num_replicas_in_sync`` in TF's words)."""
        return len(self.values)

    @property
    def num_steps(self) -> int:
        """How many rounds of messages the schedule needed: the latency (alpha) count."""
        return len(self.steps)

    def bytes_sent_per_rank(self) -> list[int]:
        """Bytes each rank sent over the whole schedule, indexed by rank."""
        return [sum(t.bytes for s in self.steps for t in s.transfers if t.src == r)
                for r in range(self.num_ranks)]

    def bytes_received_per_rank(self) -> list[int]:
        """Bytes each rank received over the whole schedule, indexed by rank."""
        return [sum(t.bytes for s in self.steps for t in s.transfers if t.dst == r)
                for r in range(self.num_ranks)]

    def schedule_table(self) -> list[dict]:
        """Plain rows, one per transfer, for printing or plotting without pandas."""
        return [
            {"step": s.index, "phase": s.phase, "src": t.src, "dst": t.dst, "chunk": t.chunk,
             "start": t.start, "elements": t.elements, "bytes": t.bytes, "kind": t.kind}
            for s in self.steps for t in s.transfers
        ]


@dataclass(frozen=True)
class ClosedForm:
    """The textbook counts for an all-reduce of ``nbytes`` over ``num_ranks`` ranks."""

    algorithm: str  # one of ALGORITHMS
    num_ranks: int  # n
    nbytes: float  # S, the size of one rank's tensor in bytes
    steps: int  # rounds of messages (each costs one alpha)
    bytes_sent_per_rank: list[float]  # exact when S divides into the algorithm's chunks

    @property
    def max_bytes_sent(self) -> float:  # the busiest rank: what its link's bandwidth must carry
        return max(self.bytes_sent_per_rank)

    @property
    def total_bytes_sent(self) -> float:  # by all ranks together
        return sum(self.bytes_sent_per_rank)


class Simulator:
    """Per-rank flat buffers plus the schedule recorded so far."""

    def __init__(self, arrays: Sequence[np.ndarray], record: bool) -> None:
        arrays = as_arrays(arrays)
        self.shape = arrays[0].shape
        self.itemsize = arrays[0].dtype.itemsize
        self.size = arrays[0].size
        self.buffers = [a.reshape(-1).copy() for a in arrays]  # (num_ranks, size), one per rank
        self.steps: list[Step] = []
        self.record = record

    def step(self, phase: str, moves: list[tuple]) -> None:
        """Run one round; each move is ``(src, dst, chunk, start, stop, kind)``."""
        # Every sender sends what it held at the start of the round: take all payloads first.
        payloads = [self.buffers[src][a:b].copy() for src, _, _, a, b, _ in moves]
        transfers = []
        for (src, dst, chunk, a, b, kind), data in zip(moves, payloads):
            if kind == "reduce":
                self.buffers[dst][a:b] += data
            else:
                self.buffers[dst][a:b] = data
            transfers.append(Transfer(src, dst, chunk, a, b - a, (b - a) * self.itemsize, kind))
        snapshot = [b.copy() for b in self.buffers] if self.record else None
        self.steps.append(Step(len(self.steps), phase, transfers, snapshot))

    def finish(self, algorithm: str, op: str) -> AllReduceResult:
        """Reshape every rank's buffer; ``mean`` divides locally, as TF does after summing."""
        n = len(self.buffers)
        finals = [b / n if op == "mean" else b for b in self.buffers]
        return AllReduceResult(algorithm, op, [f.reshape(self.shape) for f in finals], self.steps)


def chunk_bounds(size: int, parts: int) -> list[int]:
    """Offsets of ``parts`` chunks sized as ``np.array_split`` does: the first ``size % parts``
    get one element more."""
    parts = whole_number(parts, ChunkCountError, f"cannot split a tensor into parts={parts!r} "
                         "chunks; expected a whole number >= 1 (one chunk per rank).")
    base, rest = divmod(size, parts)
    return [i * base + min(i, rest) for i in range(parts + 1)]


def chunk_move(src: int, dst: int, chunk: int, bounds: list[int], kind: str) -> tuple:
    return (src, dst, chunk, bounds[chunk], bounds[chunk + 1], kind)


def run_move(src: int, dst: int, run: tuple[int, int], bounds: list[int], kind: str) -> tuple:
    """A move of chunks ``run[0] .. run[1]-1``; labelled with the chunk index if it is just one."""
    chunk = run[0] if run[1] - run[0] == 1 else None
    return (src, dst, chunk, bounds[run[0]], bounds[run[1]], kind)


def check_values(values: Sequence[np.ndarray], op: str) -> list[np.ndarray]:
    """``values`` as one array per rank (see :func:`as_arrays`), once ``op`` is a known one."""
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise UnknownReduceOpError(f"op={op!r} is not a reduction the simulators know; expected "
                                   f"one of {REDUCE_OPS}. TF's ReduceOp.SUM is 'sum', MEAN 'mean'.")
    return as_arrays(values)


def _one_per_rank(values) -> bool:
    """Whether ``values`` can hold one value per rank: an iterable that is not text, a dict, or
    a single array of at most one dimension (its elements would become ranks of one number)."""
    if isinstance(values, np.ndarray):
        return values.ndim >= 2
    return isinstance(values, Iterable) and not isinstance(values, (str, bytes, Mapping))


def as_arrays(values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One numpy array per rank, all of one shape and one numeric dtype, or a plain error.

    ``values``: a list (or tuple, or other iterable) with one array per rank, e.g. every
    replica's gradient of one variable; a 2-D or higher array counts as one rank per row.
    """
    if not _one_per_rank(values):
        shown = repr(values) if len(repr(values)) <= 40 else repr(values)[:37] + "..."
        raise PerReplicaValuesError(
            f"got {shown} (a {type(values).__name__}), not one array per rank; pass a list with "
            "one numpy array per rank (one per replica), e.g. [grad_on_rank0, grad_on_rank1]. "
            "For one number per rank, pass a list of numbers, e.g. [1.0, 2.0].")
    arrays = []
    for rank, v in enumerate(values):
        try:
            arrays.append(np.asarray(v))
        except ValueError as exc:  # numpy refuses ragged nested lists
            raise ShapeMismatchError(
                f"rank {rank}'s value is not a rectangular array ({exc}); every rank must hold "
                "one array of one shape. Pass each rank's value as a numpy array.") from exc
    if not arrays:
        raise ReplicaCountError("got no per-replica values; expected a list with one array per "
                                "rank (at least one). Pass e.g. [grad_on_rank0, grad_on_rank1].")
    first = arrays[0]
    if first.dtype.kind not in "iufc":
        raise UnsupportedDtypeError(f"rank 0 holds dtype {first.dtype}, which cannot be summed; "
                                    f"expected an integer, float or complex array. Cast it first, "
                                    f"e.g. values = [v.astype(np.float32) for v in values].")
    for rank, a in enumerate(arrays[1:], start=1):
        if a.shape != first.shape or a.dtype != first.dtype:
            raise ShapeMismatchError(
                f"rank {rank} holds shape {a.shape} dtype {a.dtype} but rank 0 holds shape "
                f"{first.shape} dtype {first.dtype}; every replica must contribute the same shape "
                f"and dtype. Check that all ranks pass the same variable's gradient.")
    return arrays


def check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise UnknownAlgorithmError(f"algorithm={algorithm!r} is not known; expected one of "
                                    f"{ALGORITHMS}. Pick one of those names.")


def check_num_ranks(n: int) -> None:
    if not is_whole(n) or n < 1:
        raise ReplicaCountError(f"got {n!r} ranks; expected a whole number >= 1 (1 means no "
                                f"communication at all). Pass the number of replicas, e.g. 4.")
