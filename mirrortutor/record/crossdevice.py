"""What is recorded of every all-reduce, and the plain words for what goes wrong there.

``tf.distribute`` strategies hand every reduction to a cross-device implementation
(``CollectiveAllReduce``, ``ReductionToOneDevice``, ``HierarchicalCopyAllReduce``, ...). A
pass-through wrapper (:class:`~mirrortutor.record.tf_internals.PassThroughCrossDeviceOps`) sits in
front of the real one and reports each call; :func:`record_reduction` keeps its per-replica inputs
and outputs in the trace. :func:`check_same_shapes` says in plain words when the inputs cannot be
reduced (an uneven batch), :func:`warn_if_identical` when they look like a mistake. Gathers
(``strategy.gather``, ``ReplicaContext.all_gather``) are recorded the same way, as path "gather".
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import tensorflow as tf

from ..errors import BatchSplitError, UnknownAlgorithmError
from .records import AllReduceRecord, SkippedRecord
from .values import why_not_recorded

#: The cross-device implementations TensorFlow offers, by class name; "default" lets TF choose
#: (collectives: RING on CPUs, NCCL on GPUs, since TF 2.13). One vocabulary for the whole package.
IMPLEMENTATIONS = ("default", "ReductionToOneDevice", "HierarchicalCopyAllReduce", "NcclAllReduce")


def cross_device_ops(name: str) -> tf.distribute.CrossDeviceOps | None:
    """The ``cross_device_ops=`` argument for implementation ``name`` (None: TF's default)."""
    if name not in IMPLEMENTATIONS:
        raise UnknownAlgorithmError(f"unknown implementation {name!r}; expected one of "
                                    f"{IMPLEMENTATIONS} (TF's cross_device_ops class names, or "
                                    "'default' for TensorFlow's own choice).")
    return None if name == "default" else getattr(tf.distribute, name)()


def norm(a: np.ndarray) -> float:
    """The L2 norm, without BLAS: this runs inside training, and on a small machine OpenBLAS's
    helper threads keep spinning after a call, taking CPU from the next training steps."""
    x = np.asarray(a, dtype=np.float64).ravel()
    return math.sqrt(float(np.einsum("i,i->", x, x)))


def check_same_shapes(values: list[list]) -> None:
    """Per-replica tensors (``[value][replica]``) of different shapes cannot be summed: say why,
    before TF's AddN does."""
    for tensors in values:
        shapes = [tf.TensorShape(getattr(t, "shape", None)) for t in tensors]
        if len(shapes) < 2 or not all(s.is_fully_defined() for s in shapes):
            continue
        if len({tuple(s.as_list()) for s in shapes}) > 1:
            sizes = [s.as_list()[0] if s.rank else None for s in shapes]
            raise BatchSplitError(
                f"The replicas' values have different shapes ({', '.join(str(s) for s in shapes)}), "
                f"so they cannot be added up element by element (axis=None). This happens when a "
                f"global batch does not divide evenly among {len(shapes)} replicas (here: {sizes} "
                "examples). Keras 3's fit() reduces its FIRST batch this way to build the model "
                "(TensorFlowTrainer._maybe_symbolic_build), so for fit use a global batch size "
                f"that is a multiple of {len(shapes)} (drop_remainder=True drops only the last, "
                "short batch: it cannot even out a batch that never splits evenly). For "
                "strategy.reduce, axis=0 (reduce along the batch) works with uneven shards."
            )


def destination_name(dest, i: int) -> str:
    if isinstance(dest, (tf.Variable, tf.distribute.DistributedValues)) and hasattr(dest, "name"):
        try:
            return dest.name.split(":")[0]
        except (AttributeError, ValueError):
            pass
    return f"value {i}"


def warn_if_identical(trace, step: int, ins: list[list[np.ndarray]]) -> None:
    """Flag a SUM all-reduce whose inputs are the same on every replica: usually a mistake."""
    if len(ins[0]) < 2 or not any(np.any(t[0]) for t in ins):
        return
    if all(all(np.array_equal(t[0], other) for other in t[1:]) for t in ins):
        trace.warn(
            f"Step {step}: every replica sent identical values into a SUM all-reduce, so the "
            f"result is just {len(ins[0])} times one replica's value. Either the values were "
            "all-reduced already (Keras optimizers all-reduce the gradients they are given: pass "
            "them the LOCAL gradients), or every replica got the same data (distribute the "
            "dataset with strategy.experimental_distribute_dataset).",
            cause="identical inputs to a SUM all-reduce")


def _norms(values: list[list[np.ndarray]]) -> np.ndarray:
    """(tensors, replicas) L2 norms; NaN where a tensor has fewer copies than another."""
    out = np.full((len(values), max(len(t) for t in values)), np.nan)
    for i, t in enumerate(values):
        out[i, :len(t)] = [norm(a) for a in t]
    return out


def record_reduction(recorder, path: str, reduce_op, inputs: list[list], destinations: list,
                     results: list[list], implementation: str, *, outside: bool = False) -> None:
    """Keep one all-reduce: ``inputs[tensor][replica]`` in, ``results[tensor][destination]`` out.

    Norms always; whole values when the recording policy keeps tensors that size. A tensor that
    cannot be copied (a sparse gradient) is recorded as skipped, with the reason. Called by the
    strategy's recorder for every reduction TensorFlow makes, eagerly or while tracing; one made
    ``outside`` any step is kept apart (:meth:`~mirrortutor.record.trace.Trace.outside_reductions`).
    """
    trace = recorder.trace
    op = reduce_op.name if hasattr(reduce_op, "name") else str(reduce_op).upper()
    names = [destination_name(d, i) for i, d in enumerate(destinations)]
    reasons = [next(filter(None, map(why_not_recorded, t + r)), None)
               for t, r in zip(inputs, results)]
    skipped = [SkippedRecord(0, "all-reduce", f"{path} {op} {n}", reason)
               for n, reason in zip(names, reasons) if reason]
    kept = [i for i, reason in enumerate(reasons) if not reason]
    inputs, results = [inputs[i] for i in kept], [results[i] for i in kept]
    names = [names[i] for i in kept]
    policy = trace.recording
    counts = ([len(t) for t in inputs], [len(t) for t in results])

    def record(step, *arrays):
        it = iter(arrays)
        ins = [[next(it) for _ in range(k)] for k in counts[0]]
        outs = [[next(it) for _ in range(k)] for k in counts[1]]
        for s in skipped:
            s = replace(s, step=step)
            trace.add_outside(s) if outside else trace.slot(step).skipped.append(s)
        if not ins:  # nothing dense moved (or an empty batch_reduce, which TF allows)
            return
        keep = all(policy.keeps_values(int(np.size(t[0]))) for t in ins)
        if path == "batch_reduce" and op == "SUM":
            warn_if_identical(trace, step, ins)
        calls = trace.outside_count if outside else len(trace.slot(step).allreduces)
        rec = AllReduceRecord(
            step=step, call=calls, path=path, reduce_op=op, implementation=implementation,
            names=names, shapes=[tuple(np.shape(t[0])) for t in ins],
            input_norms=_norms(ins), output_norms=_norms(outs),
            inputs=[[np.array(a) for a in t] for t in ins] if keep else None,
            outputs=[[np.array(a) for a in t] for t in outs] if keep else None, outside=outside)
        trace.add_outside(rec) if outside else trace.slot(step).allreduces.append(rec)

    if not inputs and not skipped:
        return
    flat = [t for ts in inputs for t in ts] + [t for ts in results for t in ts]
    recorder.emitter.emit(recorder.current_step(), flat, record, always=outside)
