"""What arrives from a running step, and how it becomes records: one capture per recording point.

The recorder (:mod:`.recorder`) decides, while TensorFlow builds a step, what to keep and which
tensors carry it; it describes each recording point with a capture below (no tensors in it: names,
counts, devices) and hands the capture and the tensors to its gate (:mod:`.gate`). On the steps the
policy keeps, the gate calls ``capture.into(trace, step, *arrays)`` with numpy copies, and the
capture writes its records into the :class:`~.trace.Trace`. Nothing here imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .records import (AllReduceRecord, OutputRecord, Recording, ShardRecord, SkippedRecord,
                      SyncRecord, norm, norms, row_hashes)

__all__ = ["OutputCapture", "ReductionCapture", "ShardCapture", "Skipped", "StepMark",
           "SyncCapture", "norm", "norms"]


@dataclass(frozen=True)
class StepMark:
    """A step the rule keeps: in the trace even when nothing else of it is recorded."""

    def into(self, trace, step: int) -> None:
        trace.slot(step)


@dataclass(frozen=True)
class Skipped:
    """A value seen but not kept, and why: the trace never drops one silently."""

    what: str  # "shards", "output", "examples", …
    name: str
    reason: str

    def into(self, trace, step: int) -> None:
        trace.slot(step).skipped.append(SkippedRecord(step, self.what, self.name, self.reason))


@dataclass(frozen=True)
class ShardCapture:
    """Each replica's part of the batch: the ``index`` field's values, or the batch's rows."""

    name: str  # where in the step's arguments, e.g. "args[0].index"
    devices: tuple[str, ...]  # one per replica
    has_index: bool  # the arrays are example numbers (else: feature rows, fingerprinted)

    def into(self, trace, step: int, *arrays) -> None:
        slot = trace.slot(step)
        for r, a in enumerate(arrays):
            a = np.asarray(a)
            if a.ndim == 0:  # a rank only known at run time
                slot.skipped.append(SkippedRecord(step, "shards", self.name,
                                                  "not a batch: scalar per-replica value"))
                return
            slot.shards.append(ShardRecord(
                step=step, replica_id=r, device=self.devices[r], batch_size=int(a.shape[0]),
                example_ids=a.astype(np.int64) if self.has_index else None,
                row_hashes=None if self.has_index else row_hashes(a)))


@dataclass(frozen=True)
class OutputCapture:
    """What each replica returned: ``(name, copies)`` per returned value."""

    items: tuple[tuple[str, int], ...]

    def into(self, trace, step: int, *arrays) -> None:
        it, slot = iter(arrays), trace.slot(step)
        for name, count in self.items:
            slot.outputs.append(OutputRecord(step, name, [np.array(next(it)) for _ in range(count)]))


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # itemsize -> same-size uint
_SMALL = 1 << 15  # bytes: up to this size, comparing two arrays' bytes beats numpy's ==


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays hold the same bits (unlike ``==``: -0.0 is not 0.0, a NaN is itself).

    A recorded step compares dozens of small arrays (every copy of every variable, every copy
    of a result); for those, ``bytes ==`` (one memcmp) takes a tenth of numpy's ``==`` and
    ``all()``. Larger arrays are compared in place, without two temporary copies."""
    bits = _BITS.get(a.dtype.itemsize)
    if bits is None or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.nbytes <= _SMALL:
        return a.tobytes() == b.tobytes()
    return bool((a.view(bits) == b.view(bits)).all())


def _same_as_first(copies: list) -> list[bool]:
    """Per copy after the first: whether it holds the first's bits."""
    first = np.asarray(copies[0])
    return [same_bits(np.asarray(c), first) for c in copies[1:]]


def kept_copies(copies: list, same: list[bool] | None = None) -> list[np.ndarray]:
    """Copies of ``copies`` to keep (numpy_function's arrays may share TF's buffers, its
    docstring warns). A copy bit for bit equal to the first is kept as the first's array: the
    same values, without taking new memory for each replica, which is most of what keeping
    values costs on a step (fresh pages to fault in). ``same``: :func:`_same_as_first`, when
    the caller has it already."""
    same = _same_as_first(copies) if same is None else same
    first = np.array(copies[0])
    return [first] + [first if equal else np.array(c) for c, equal in zip(copies[1:], same)]


def _first_for_same(copies: list) -> list:
    """``copies``, with each one bit for bit equal to the first replaced by the first (not
    copied: for computing norms once, not for keeping)."""
    return [copies[0]] + [copies[0] if equal else c
                          for c, equal in zip(copies[1:], _same_as_first(copies))]


def max_abs_diff(copies: list[np.ndarray], same: list[bool] | None = None) -> float:
    """Largest |copy_r - copy_0| (inf when the copies do not even have the same shape).

    Copies in sync are the rule: one bit for bit equal to the first differs by 0 (NaN where
    the first holds an inf or a NaN, as the float64 subtraction gives), without the subtraction.
    ``same``: :func:`_same_as_first`, when the caller has it already.
    """
    first = np.asarray(copies[0])
    if any(np.shape(c) != first.shape for c in copies[1:]):
        return float("inf")
    same = _same_as_first(copies) if same is None else same
    unequal = None  # |x - x| for a copy equal to the first, computed once

    def diff(c, equal: bool) -> float:
        nonlocal unequal
        c = np.asarray(c)
        if equal:
            if unequal is None:
                unequal = 0.0 if first.dtype.kind in "biu" or np.isfinite(first).all() \
                    else float(np.max(np.abs(first.astype(np.float64) - first.astype(np.float64))))
            return unequal
        return float(np.max(np.abs(np.asarray(c, np.float64) - first.astype(np.float64))))

    return max((diff(c, equal) for c, equal in zip(copies[1:], same) if np.size(c)),
               default=0.0)


@dataclass(frozen=True)
class SyncCapture:
    """After a step, every replica's copy of each trainable mirrored variable."""

    names: tuple[str, ...]
    keep: tuple[bool, ...]  # keep the copies whole (else only how far apart they are)
    counts: tuple[int, ...]  # copies per variable
    aggregations: tuple[str, ...]

    def into(self, trace, step: int, *arrays) -> None:
        it, slot = iter(arrays), trace.slot(step)
        for name, keep, n, aggregation in zip(self.names, self.keep, self.counts,
                                              self.aggregations):
            copies = [next(it) for _ in range(n)]
            same = _same_as_first(copies)  # once, for the check and for keeping the copies
            diff = max_abs_diff(copies, same)
            slot.sync.append(SyncRecord(step, name, diff,
                                        kept_copies(copies, same) if keep else None))
            if diff > 0:
                trace.warn(
                    f"After step {step} the replicas' copies of {name!r} differ by up to "
                    f"{diff:g}, but a MirroredVariable's copies should be identical. "
                    + ("Its aggregation is NONE, so when replicas assign different values each "
                       "writes only its own copy. Create it with aggregation=MEAN, SUM or "
                       "ONLY_FIRST_REPLICA." if aggregation == "NONE" else
                       "Something wrote to one replica's copy directly; write the variable "
                       "itself instead."), cause=f"out of sync: {name}")


@dataclass
class ReductionCapture:
    """What the recorder knows of one reduction while TensorFlow builds it (the values arrive
    later, through a gate): everything an :class:`AllReduceRecord` holds but the numbers."""

    path: str  # "reduce", "batch_reduce" or "gather"
    reduce_op: str  # SUM, MEAN or GATHER
    implementation: str  # e.g. "CollectiveAllReduce (RING)"
    names: list[str]  # per kept tensor: its destination's name, or "value i"
    inputs: list[int]  # per kept tensor: how many per-replica inputs arrive
    outputs: list[int]  # per kept tensor: how many copies of the result arrive
    skipped: list[Skipped]  # tensors seen but not kept, with the reason
    outside: bool  # made outside any step
    applied_to: list[str | None]  # filled by the recorder when the program updates a variable

    def identical_inputs(self, arrays) -> bool:
        """Whether every tensor came in identical (and not all zero) from every replica."""
        it, nonzero = iter(arrays), False
        for k in self.inputs:
            ins = [next(it) for _ in range(k)]
            if k < 2 or not all(np.array_equal(ins[0], other) for other in ins[1:]):
                return False  # one tensor that differs answers it: the rest are not looked at
            nonzero = nonzero or bool(np.any(ins[0]))
        return nonzero and bool(self.inputs)

    def record(self, step: int, call: int, arrays, recording: "Recording") -> AllReduceRecord:
        """The record of this reduction at ``step``, from its arrays (inputs, then outputs)."""
        it = iter(arrays)
        ins = [[next(it) for _ in range(k)] for k in self.inputs]
        outs = [[next(it) for _ in range(k)] for k in self.outputs]
        keep = all(recording.keeps_values(int(np.size(t[0]))) for t in ins)
        # Whole values: copied (numpy_function's arrays may share TF's buffers, its docstring
        # warns; a result's identical copies share one), their norms computed from the copies
        # when first read (records.py). Else only the norms are kept: computed now, once for
        # a result's identical copies (the same bits give the same norm).
        outs = [kept_copies(t) if keep else _first_for_same(t) for t in outs]
        return AllReduceRecord(
            step=step, call=call, path=self.path, reduce_op=self.reduce_op,
            implementation=self.implementation, names=list(self.names),
            shapes=[tuple(np.shape(t[0])) for t in ins],
            input_norms=None if keep else norms(ins), output_norms=None if keep else norms(outs),
            inputs=[[np.array(a) for a in t] for t in ins] if keep else None,
            outputs=outs if keep else None,
            outside=self.outside, applied_to=self.applied_to)

    def into(self, trace, step: int, *arrays) -> None:
        """The reduction's values arrived: its record, its skipped tensors, a warning if the
        inputs look like a mistake."""
        for s in self.skipped:
            s = SkippedRecord(step, s.what, s.name, s.reason)
            trace.add_outside(s) if self.outside else trace.slot(step).skipped.append(s)
        if not self.inputs:  # nothing dense moved (or an empty batch_reduce, which TF allows)
            return
        if self.path == "batch_reduce" and self.reduce_op == "SUM" and \
                self.identical_inputs(arrays):
            trace.warn(
                f"Step {step}: every replica sent identical values into a SUM all-reduce, so the "
                f"result is just {self.inputs[0]} times one replica's value. Either the values "
                "were all-reduced already (Keras optimizers all-reduce the gradients they are "
                "given: pass them the LOCAL gradients), or every replica got the same data "
                "(distribute the dataset with strategy.experimental_distribute_dataset).",
                cause="identical inputs to a SUM all-reduce")
        call = trace.outside_count if self.outside else len(trace.slot(step).allreduces)
        rec = self.record(step, call, arrays, trace.recording)
        trace.add_outside(rec) if self.outside else trace.slot(step).allreduces.append(rec)
