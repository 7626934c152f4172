"""Watching TensorFlow's all-reduce: a pass-through ``CrossDeviceOps`` that records.

``tf.distribute`` strategies hand every reduction to a cross-device implementation
(``CollectiveAllReduce``, ``ReductionToOneDevice``, ``HierarchicalCopyAllReduce``, ...).
:class:`RecordingCrossDeviceOps` sits in front of the real one: it calls it, unchanged, then
records the per-replica inputs and the outputs it returned. It also says in plain words when the
inputs cannot be reduced (shapes differ: an uneven batch) or look like a mistake (identical on
every replica).
"""

from __future__ import annotations

import math
import warnings
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib
from tensorflow.python.distribute import values as values_lib

from .errors import BatchSplitError
from .trace import Trace


def norm(a: np.ndarray) -> float:
    """The L2 norm, without BLAS: this runs inside training, and on a small machine OpenBLAS's
    helper threads keep spinning after a call, taking CPU from the next training steps."""
    x = np.asarray(a, dtype=np.float64).ravel()
    return math.sqrt(float(np.einsum("i,i->", x, x)))


def implementation_name(inner, extended, options) -> str:
    name = type(inner).__name__
    if isinstance(inner, cross_device_ops_lib.CollectiveAllReduce):
        impl = extended._communication_options.merge(options).implementation  # RING / NCCL / AUTO
        name += f" ({impl.name})"
    return name


class RecordingCrossDeviceOps(tf.distribute.CrossDeviceOps):
    """Passes every call to TF's real implementation, and records its inputs and outputs."""

    def __init__(self, inner, extended: "tf.distribute.StrategyExtended"):
        super().__init__()
        self.inner = inner
        self._extended = weakref.proxy(extended)

    @property
    def _num_between_graph_workers(self):
        return self.inner._num_between_graph_workers

    def reduce(self, reduce_op, per_replica_value, destinations, options=None):
        check_same_shapes([per_replica_value])
        out = self.inner.reduce(reduce_op, per_replica_value, destinations, options)
        self._extended._record_reduction("reduce", reduce_op, [per_replica_value],
                                         [destinations], [out], self.inner, options)
        return out

    def batch_reduce(self, reduce_op, value_destination_pairs, options=None):
        check_same_shapes([v for v, _ in value_destination_pairs])
        outs = self.inner.batch_reduce(reduce_op, value_destination_pairs, options)
        values, dests = zip(*value_destination_pairs) if value_destination_pairs else ((), ())
        self._extended._record_reduction("batch_reduce", reduce_op, list(values), list(dests),
                                         list(outs), self.inner, options)
        return outs

    def broadcast(self, tensor, destinations):
        return self.inner.broadcast(tensor, destinations)

    def _gather(self, per_replica_value, destinations, axis, options=None):
        return self.inner._gather(per_replica_value, destinations, axis, options)

    def _all_reduce(self, reduce_op, value, replica_id, options):
        # Replica-context all-reduce without merge_call: only used under XLA on GPUs, where no
        # Python callback can be compiled in, so it passes through unrecorded.
        return self.inner._all_reduce(reduce_op, value, replica_id, options)


def check_same_shapes(values) -> None:
    """Per-replica values of different shapes cannot be summed: say why, before TF's AddN does."""
    for value in values:
        shapes = [t.shape for t in per_replica_tensors(value)]
        if len(shapes) < 2 or not all(s.is_fully_defined() for s in shapes):
            continue
        if len({tuple(s.as_list()) for s in shapes}) > 1:
            sizes = [s.as_list()[0] if s.rank else None for s in shapes]
            raise BatchSplitError(
                f"The replicas' values have different shapes ({', '.join(str(s) for s in shapes)}), "
                f"so they cannot be added up element by element. This happens when a global batch "
                f"does not divide evenly among {len(shapes)} replicas (here: {sizes} examples). "
                f"Use a global batch size that is a multiple of {len(shapes)}, or batch with "
                "drop_remainder=True; Keras fit() needs one of those. For strategy.reduce, "
                "axis=0 (reduce along the batch) works with uneven shards."
            )


def per_replica_tensors(value) -> list:
    """The per-replica (or per-destination) tensors of a distributed value, or [value]."""
    if isinstance(value, values_lib.DistributedValues):
        return list(value.values)
    return [value]


def destination_name(dest, i: int) -> str:
    if isinstance(dest, (tf.Variable, values_lib.DistributedValues)) and hasattr(dest, "name"):
        try:
            return dest.name.split(":")[0]
        except (AttributeError, ValueError):
            pass
    return f"value {i}"


def warn_if_identical(trace: Trace, step: int, ins: list[list[np.ndarray]]) -> None:
    """Flag a SUM all-reduce whose inputs are the same on every replica: usually a mistake."""
    if len(ins[0]) < 2 or not any(np.any(t[0]) for t in ins):
        return
    if all(all(np.array_equal(t[0], other) for other in t[1:]) for t in ins):
        message = (
            f"Step {step}: every replica sent identical values into a SUM all-reduce, so the "
            f"result is just {len(ins[0])} times one replica's value. Either the values were "
            "all-reduced already (Keras optimizers all-reduce the gradients they are given: pass "
            "them the LOCAL gradients), or every replica got the same data (distribute the "
            "dataset with strategy.experimental_distribute_dataset)."
        )
        if message.split(":", 1)[1] not in {w.split(":", 1)[1] for w in trace.warnings}:
            warnings.warn(message, stacklevel=2)
        if len(trace.warnings) < 100:  # bounded, like the rest of the trace
            trace.warnings.append(message)
