"""All-reduce from scratch: three schedules that really move chunks between per-rank buffers.

An all-reduce turns ``n`` per-replica tensors (one per rank) into their sum (or mean) on *every*
rank. ``MirroredStrategy`` does this to the gradients every step. The simulators here keep one flat
numpy buffer per rank and, step by step, copy slices from a sender's buffer into a receiver's
buffer, adding (``kind="reduce"``) or overwriting (``kind="copy"``). Within a step every sender
sends what it held at the start of the step, as if all links fired at once. Nothing is computed
with ``np.sum``: the answer emerges from the schedule, so a student can step through it.

- :func:`reduce_to_one`: what TF's ``ReductionToOneDevice`` does. Everyone sends the whole tensor
  to a root, the root adds, then sends the result back. 2 steps; the root's link carries
  ``(n-1)·S`` bytes each way, the bottleneck.
- :func:`ring`: NCCL's and TF's RING. Split into ``n`` chunks; ``n-1`` reduce-scatter steps, then
  ``n-1`` all-gather steps, each rank sending only to its right neighbour.
  Every rank sends ``2(n-1)/n·S`` bytes.
- :func:`halving_doubling`: Rabenseifner's algorithm as in MPICH's ``MPI_Allreduce``.
  Recursive halving (reduce-scatter), then recursive doubling (all-gather): ``2·log2(n)`` steps
  for ``n`` a power of two, two more otherwise.

``S`` is the tensor's size in bytes throughout. ``op="mean"`` sums, then every rank divides by
``n`` locally (no extra step), so integer tensors come back as float64, as with ``np.mean``.
Integer sums wrap around at the dtype's limits like a real all-reduce (``np.sum`` widens instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import (
    ChunkCountError,
    InvalidQuantityError,
    RankError,
    ReplicaCountError,
    ShapeMismatchError,
    UnknownAlgorithmError,
    UnknownReduceOpError,
    UnsupportedDtypeError,
)

__all__ = ["ALGORITHMS", "AllReduceResult", "ClosedForm", "REDUCE_OPS", "Step", "Transfer",
           "closed_form", "halving_doubling", "reduce_to_one", "ring"]

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
    def max_bytes_sent(self) -> float:
        """Bytes sent by the busiest rank: what its link's bandwidth must carry."""
        return max(self.bytes_sent_per_rank)

    @property
    def total_bytes_sent(self) -> float:
        """Bytes sent by all ranks together."""
        return sum(self.bytes_sent_per_rank)


def reduce_to_one(values: Sequence[np.ndarray], op: str = "sum", root: int = 0, *,
                  record: bool = False) -> AllReduceResult:
    """Gather every tensor on ``root``, add there, broadcast back: TF's ``ReductionToOneDevice``.

    Convention: 2 steps for ``n > 1`` (gather, then broadcast), 0 for ``n == 1``. Within a step the
    root's ``n-1`` messages share its one link, so the step count hides the bottleneck that the
    byte count shows: the root sends ``(n-1)·S`` and receives ``(n-1)·S``; everyone else sends
    ``S``. ``record=True`` keeps every rank's buffer after each step in ``Step.buffers``.
    """
    arrays = _check_values(values, op)
    n = len(arrays)
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
        raise RankError(f"root={root!r} is not a rank of this all-reduce; expected an int in "
                        f"0..{n - 1} for {n} ranks. Pass root=0 (TF reduces on one device).")
    sim = _Simulator(arrays, record)
    if n > 1:
        others = [r for r in range(n) if r != root]
        sim.step("gather", [(r, root, None, 0, sim.size, "reduce") for r in others])
        sim.step("broadcast", [(root, r, None, 0, sim.size, "copy") for r in others])
    return sim.finish("reduce_to_one", op)


def ring(values: Sequence[np.ndarray], op: str = "sum", num_chunks: int | None = None, *,
         record: bool = False) -> AllReduceResult:
    """Ring all-reduce: reduce-scatter then all-gather around ``r -> (r+1) mod n``.

    The flat tensor is split into ``n`` chunks with ``np.array_split`` rules (sizes differ by at
    most one element). Reduce-scatter: at step ``s`` rank ``r`` sends chunk ``(r-s) mod n`` to rank
    ``(r+1) mod n``, which adds it in; after ``n-1`` steps rank ``r`` owns the reduced chunk
    ``(r+1) mod n``. All-gather: at step ``s`` rank ``r`` forwards chunk ``(r+1-s) mod n``, which
    the receiver copies. Exactly ``2(n-1)`` steps; each rank sends the sum of its chunks' sizes,
    ``2(n-1)/n·S`` when the element count divides by ``n``.

    ``num_chunks`` exists to make the rule explicit: this ring always uses one chunk per rank, so
    any other value raises :class:`ChunkCountError` (NCCL pipelines further *inside* each chunk,
    which changes the time but not this schedule).
    """
    arrays = _check_values(values, op)
    n = len(arrays)
    if num_chunks is not None and (isinstance(num_chunks, bool) or num_chunks != n):
        raise ChunkCountError(
            f"ring all-reduce got num_chunks={num_chunks!r} for {n} ranks; the ring splits the "
            f"tensor into exactly one chunk per rank so that after n-1 reduce-scatter steps each "
            f"rank owns one reduced chunk. Pass num_chunks=None (or {n}).")
    sim = _Simulator(arrays, record)
    bounds = _chunk_bounds(sim.size, n)
    for s in range(n - 1):
        sim.step("reduce-scatter", [_chunk_move(r, (r + 1) % n, (r - s) % n, bounds, "reduce")
                                    for r in range(n)])
    for s in range(n - 1):
        sim.step("all-gather", [_chunk_move(r, (r + 1) % n, (r + 1 - s) % n, bounds, "copy")
                                for r in range(n)])
    return sim.finish("ring", op)


def halving_doubling(values: Sequence[np.ndarray], op: str = "sum", *,
                     record: bool = False) -> AllReduceResult:
    """Rabenseifner's all-reduce: recursive halving, then recursive doubling (as in MPICH).

    For ``n = p`` a power of two the tensor is split into ``p`` chunks. Reduce-scatter: at the
    step with distance ``d = 1, 2, 4, ...`` rank ``v`` pairs with ``v XOR d``; both hold the same
    run of chunks, the lower rank keeps the lower half and sends the upper half, the partner the
    reverse, and each adds what it receives. After ``log2 p`` steps each rank owns one reduced
    chunk. All-gather walks back (``d = p/2, ..., 1``), partners swapping everything they own.
    ``2·log2(p)`` steps; each rank sends ``2(p-1)/p·S``, the same as the ring.

    For ``n`` not a power of two, MPICH's fix: with ``p`` the largest power of two below ``n`` and
    ``e = n - p``, one extra "fold" step first has each even rank ``2i < 2e`` send its whole tensor
    to ``2i+1``, which adds it; the ``p`` survivors run the algorithm above; one extra "unfold" step
    returns the result to the folded ranks. So ``2·log2(p) + 2`` steps, and ranks ``2i+1`` send
    ``S`` more than the rest: the price of the odd rank count.
    """
    arrays = _check_values(values, op)
    n = len(arrays)
    sim = _Simulator(arrays, record)
    p = 1 << (n.bit_length() - 1)  # largest power of two <= n
    extra = n - p
    if extra:
        sim.step("fold", [(2 * i, 2 * i + 1, None, 0, sim.size, "reduce") for i in range(extra)])
    real = [2 * v + 1 if v < extra else v + extra for v in range(p)]  # survivor v -> its rank
    bounds = _chunk_bounds(sim.size, p)
    lo, hi = [0] * p, [p] * p  # survivor v currently owns chunks lo[v] .. hi[v]-1
    d = 1
    while d < p:
        moves, keep = [], []
        for v in range(p):
            mid = (lo[v] + hi[v]) // 2
            sent, kept = ((mid, hi[v]), (lo[v], mid)) if v < v ^ d else ((lo[v], mid), (mid, hi[v]))
            moves.append(_run_move(real[v], real[v ^ d], sent, bounds, "reduce"))
            keep.append(kept)
        sim.step("reduce-scatter", moves)
        lo, hi = [k[0] for k in keep], [k[1] for k in keep]
        d *= 2
    d = p // 2
    while d >= 1:
        sim.step("all-gather", [_run_move(real[v], real[v ^ d], (lo[v], hi[v]), bounds, "copy")
                                for v in range(p)])
        lo = [min(lo[v], lo[v ^ d]) for v in range(p)]
        hi = [max(hi[v], hi[v ^ d]) for v in range(p)]
        d //= 2
    if extra:
        sim.step("unfold", [(2 * i + 1, 2 * i, None, 0, sim.size, "copy") for i in range(extra)])
    return sim.finish("halving_doubling", op)


def closed_form(algorithm: str, n: int, nbytes: float) -> ClosedForm:
    """Textbook step count and bytes each rank sends, to check the simulators against.

    - ``ring``: ``2(n-1)`` steps, every rank sends ``2(n-1)/n·S``.
    - ``halving_doubling``: ``2·log2(n)`` steps and ``2(n-1)/n·S`` per rank for ``n`` a power of
      two; otherwise ``2·log2(p)+2`` steps: the fold senders (even ranks below ``2e``) send just
      ``S``, their partners ``2(p-1)/p·S + S`` (the unfold), every other rank ``2(p-1)/p·S``.
    - ``reduce_to_one`` (root 0): 2 steps; the root sends ``(n-1)·S``, the others ``S``.

    With ``n == 1`` every algorithm needs 0 steps and 0 bytes.
    """
    _check_algorithm(algorithm)
    _check_num_ranks(n)
    n = int(n)
    s = float(_check_quantity("nbytes", nbytes))
    if algorithm == "ring":
        return ClosedForm(algorithm, n, s, 2 * (n - 1), [2 * (n - 1) / n * s] * n)
    if algorithm == "reduce_to_one":
        steps = 2 if n > 1 else 0
        return ClosedForm(algorithm, n, s, steps, [(n - 1) * s] + [s] * (n - 1))
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    core = 2 * (p - 1) / p * s
    folded, partners = range(0, 2 * extra, 2), range(1, 2 * extra, 2)
    per_rank = [s if r in folded else core + s if r in partners else core for r in range(n)]
    return ClosedForm(algorithm, n, s, 2 * int(math.log2(p)) + (2 if extra else 0), per_rank)


# ----------------------------------------------------------------------------- internals


class _Simulator:
    """Per-rank flat buffers plus the schedule recorded so far."""

    def __init__(self, arrays: list[np.ndarray], record: bool) -> None:
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


def _chunk_bounds(size: int, parts: int) -> list[int]:
    """Offsets of ``parts`` chunks sized as ``np.array_split`` does: the first ``size % parts``
    get one element more."""
    base, rest = divmod(size, parts)
    return [i * base + min(i, rest) for i in range(parts + 1)]


def _chunk_move(src: int, dst: int, chunk: int, bounds: list[int], kind: str) -> tuple:
    return (src, dst, chunk, bounds[chunk], bounds[chunk + 1], kind)


def _run_move(src: int, dst: int, run: tuple[int, int], bounds: list[int], kind: str) -> tuple:
    """A move of chunks ``run[0] .. run[1]-1``; labelled with the chunk index if it is just one."""
    chunk = run[0] if run[1] - run[0] == 1 else None
    return (src, dst, chunk, bounds[run[0]], bounds[run[1]], kind)


def _check_values(values: Sequence[np.ndarray], op: str) -> list[np.ndarray]:
    if op not in REDUCE_OPS:
        raise UnknownReduceOpError(f"op={op!r} is not a reduction the simulators know; expected "
                                   f"one of {REDUCE_OPS}. TF's ReduceOp.SUM is 'sum', MEAN 'mean'.")
    arrays = [np.asarray(v) for v in values]
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


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise UnknownAlgorithmError(f"algorithm={algorithm!r} is not known; expected one of "
                                    f"{ALGORITHMS}. Pick one of those names.")


def _check_num_ranks(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ReplicaCountError(f"got {n!r} ranks; expected a whole number >= 1 (1 means no "
                                f"communication at all). Pass the number of replicas, e.g. 4.")


def _check_quantity(name: str, value: float, positive: bool = False) -> float:
    """``value`` if it is a finite real number >= 0 (> 0 with ``positive``), else a clear error."""
    real = (int, float, np.integer, np.floating)
    number = not isinstance(value, bool) and isinstance(value, real)
    if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise InvalidQuantityError(f"{name}={value!r} is not a usable size, time or rate; expected "
                                   f"a finite number {bound} (bytes, seconds or bytes per second). "
                                   f"Check the units and the sign of {name}.")
    return value
