"""``mt.MirroredStrategy``: TensorFlow's MirroredStrategy, with a trace of what it did.

It *is* a ``tf.distribute.MirroredStrategy`` (a subclass) built on TF's own ``MirroredExtended``;
it only adds observation at three places TensorFlow itself routes through:

- variable creation (``_create_variable``): each MirroredVariable and its per-device components;
- ``strategy.run``: each replica's shard of the batch going in, what each replica returned, and
  afterwards whether every replica still holds the same weights (the sync check);
- the cross-device implementation (``CollectiveAllReduce``, ``ReductionToOneDevice``, …): each
  all-reduce's per-replica inputs and its output, captured around TF's real call.

It also gives every instance its own range of collective keys, so strategies over different
numbers of devices can live in one process (plain TF aborts every later collective with "joining a
group with size 3, but that group has size 2").
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib
from tensorflow.python.distribute import distribute_utils, mirrored_strategy, reduce_util
from tensorflow.python.distribute import values as values_lib
from tensorflow.python.util import nest

from .capture import Emitter
from .crossdevice import (RecordingCrossDeviceOps, destination_name, implementation_name, norm,
                          per_replica_tensors, warn_if_identical)
from .errors import OutsideScopeError
from .recording import RecordingStrategy
from .trace import AllReduceRecord, Recording, Trace

# TF's collective ops find each other by group key, and keys are process-wide. TF's own tests give
# each strategy a distinct `_collective_key_base`; so do we. Plain TF strategies use base 0.
_KEY_SPACING = 10_000
_key_bases = itertools.count(1)


def next_collective_key_base() -> int:
    """A fresh base for collective keys, unused by any strategy in this process."""
    return next(_key_bases) * _KEY_SPACING


class _RecordingMirroredExtended(mirrored_strategy.MirroredExtended):
    """TF's MirroredExtended plus the three observation points; see the module docstring."""

    def __init__(self, container_strategy, devices=None, cross_device_ops=None):
        super().__init__(container_strategy, devices=devices, cross_device_ops=cross_device_ops)
        self._wrappers: dict[int, _RecordingCrossDeviceOps] = {}

    @property
    def _trace(self) -> Trace:
        return self._container_strategy().trace

    @property
    def _emitter(self) -> Emitter:
        return self._container_strategy()._emitter

    def _current_step(self):
        return self._container_strategy()._current_step()

    # ---- 1. variables ------------------------------------------------------------------------
    def _create_variable(self, next_creator, **kwargs):
        var = super()._create_variable(next_creator, **kwargs)
        if isinstance(var, values_lib.DistributedVariable):
            self._container_strategy()._on_variable(var)
        return var

    def _update(self, var, fn, args, kwargs, group):
        if not isinstance(var, values_lib.DistributedVariable):  # TF would fail a bare assert
            name = getattr(var, "name", repr(var)).split(":")[0]
            device = getattr(var, "device", "") or "one device"
            raise OutsideScopeError(
                f"Variable {name!r} was not created inside this strategy's scope, so it is a "
                f"single variable on {device}, not one copy per replica, and the "
                f"{self._num_replicas_in_sync} replicas cannot update it together. Create the "
                "model and the optimizer inside `with strategy.scope():` (build the model there "
                "too), then train again."
            )
        return super()._update(var, fn, args, kwargs, group)

    # ---- 3. all-reduce ---------------------------------------------------------------------
    def _wrap(self, inner):
        if isinstance(inner, RecordingCrossDeviceOps):
            return inner
        long_lived = [getattr(self, name, None) for name in
                      ("_cross_device_ops", "_collective_ops", "_host_cross_device_ops")]
        if any(inner is x for x in long_lived if x is not None):
            key = id(inner)  # one wrapper each, so TF's identity checks keep holding
            if key not in self._wrappers:
                self._wrappers[key] = RecordingCrossDeviceOps(inner, self)
            return self._wrappers[key]
        return RecordingCrossDeviceOps(inner, self)

    def _get_cross_device_ops(self, value):
        return self._wrap(super()._get_cross_device_ops(value))

    def _reduce_to(self, reduce_op, value, destinations, options):
        # TF's MirroredExtended._reduce_to, with its inline ReductionToOneDevice() routed through
        # the recorder too (on CPU devices every strategy.reduce and MEAN assign goes that way).
        if distribute_utils.is_mirrored(value) and reduce_op == reduce_util.ReduceOp.MEAN:
            return value

        def get_values(value):
            if not isinstance(value, values_lib.DistributedValues):
                return cross_device_ops_lib.reduce_non_distributed_value(
                    reduce_op, value, destinations, self._num_replicas_in_sync)
            if self._use_merge_call() and (
                    not cross_device_ops_lib._devices_match(value, destinations)
                    or any("cpu" in d.lower()
                           for d in cross_device_ops_lib.get_devices_from(destinations))):
                return self._wrap(cross_device_ops_lib.ReductionToOneDevice()).reduce(
                    reduce_op, value, destinations)
            return self._get_cross_device_ops(value).reduce(
                reduce_op, value, destinations=destinations,
                options=self._communication_options.merge(options))

        return nest.map_structure(get_values, value)

    def _record_reduction(self, path, reduce_op, values, destinations, outputs, inner, options):
        if not values:  # an empty batch_reduce (TF allows it): nothing moved, nothing to record
            return
        trace = self._trace
        policy = trace.recording
        names = [destination_name(d, i) for i, d in enumerate(destinations)]
        inputs = [per_replica_tensors(v) for v in values]  # [tensor][replica]
        results = [per_replica_tensors(o) for o in outputs]  # [tensor][destination]
        impl = implementation_name(inner, self, options)
        op = reduce_op.name if hasattr(reduce_op, "name") else str(reduce_op).upper()
        counts = (len(inputs), [len(t) for t in inputs], [len(t) for t in results])

        def record(step, *arrays):
            it = iter(arrays)
            ins = [[next(it) for _ in range(k)] for k in counts[1]]
            outs = [[next(it) for _ in range(k)] for k in counts[2]]
            keep = all(policy.keeps_values(int(np.size(t[0]))) for t in ins)
            if path == "batch_reduce" and op == "SUM":
                warn_if_identical(trace, step, ins)
            slot = trace._step(step)
            slot.allreduces.append(AllReduceRecord(
                step=step, call=len(slot.allreduces), path=path, reduce_op=op,
                implementation=impl, names=names,
                shapes=[tuple(np.shape(t[0])) for t in ins],
                input_norms=np.array([[norm(a) for a in t] for t in ins]).reshape(counts[0], -1),
                output_norms=np.array([[norm(a) for a in t] for t in outs]).reshape(counts[0], -1),
                inputs=[[np.array(a) for a in t] for t in ins] if keep else None,
                outputs=[[np.array(a) for a in t] for t in outs] if keep else None,
            ))

        flat = [t for ts in inputs for t in ts] + [t for ts in results for t in ts]
        self._emitter.emit(self._current_step(), flat, record,
                           always=tf.executing_eagerly() and not self._container_strategy()._in_run)


class MirroredStrategy(RecordingStrategy, tf.distribute.MirroredStrategy):
    """A drop-in ``tf.distribute.MirroredStrategy`` that records a :class:`~mirrortutor.Trace`.

    Same arguments as TF's (``devices``, ``cross_device_ops``), plus ``recording`` to choose how
    much to keep (default: the first 20 steps and a bounded sample after). Use it exactly as TF's:
    ``strategy.scope()``, ``strategy.run``, ``experimental_distribute_dataset``, Keras ``fit``.
    Read ``strategy.trace`` afterwards.
    """

    def __init__(self, devices=None, cross_device_ops=None, *, recording: Recording | None = None):
        self._collective_key_base = next_collective_key_base()
        self._begin_recording(recording)
        extended = _RecordingMirroredExtended(self, devices=devices,
                                              cross_device_ops=cross_device_ops)
        # Skip MirroredStrategy.__init__, which would build a plain MirroredExtended.
        super(tf.distribute.MirroredStrategy, self).__init__(extended)
        if (isinstance(cross_device_ops, tf.distribute.HierarchicalCopyAllReduce)
                and self.num_replicas_in_sync % 2):
            warnings.warn(
                f"TensorFlow's HierarchicalCopyAllReduce adds up two groups of "
                f"{self.num_replicas_in_sync // 2} replicas, so with an odd number of replicas "
                f"({self.num_replicas_in_sync}) the last replica's values are left out and every "
                "sum is wrong (seen in TF 2.21; chapter 04 shows it). Use an even number of "
                "replicas, or another cross_device_ops.", stacklevel=2)
        # the host CPU that feeds the replicas: where the step counter and callbacks live
        self._attach_step_counter(extended._input_workers_devices[0][0])

