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
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib
from tensorflow.python.distribute import distribute_utils, mirrored_strategy, reduce_util
from tensorflow.python.distribute import values as values_lib
from tensorflow.python.util import nest

from .capture import Emitter
from .errors import BatchSplitError, OutsideScopeError
from .trace import (AllReduceRecord, OutputRecord, Recording, ShardRecord, SyncRecord, Trace,
                    VariableRecord, VariableSnapshot, row_hashes)

# TF's collective ops find each other by group key, and keys are process-wide. TF's own tests give
# each strategy a distinct `_collective_key_base`; so do we. Plain TF strategies use base 0.
_KEY_SPACING = 10_000
_key_bases = itertools.count(1)


def next_collective_key_base() -> int:
    """A fresh base for collective keys, unused by any strategy in this process."""
    return next(_key_bases) * _KEY_SPACING


def _norm(a: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64).ravel()))


def _implementation_name(inner, extended, options) -> str:
    name = type(inner).__name__
    if isinstance(inner, cross_device_ops_lib.CollectiveAllReduce):
        impl = extended._communication_options.merge(options).implementation  # RING / NCCL / AUTO
        name += f" ({impl.name})"
    return name


class _RecordingCrossDeviceOps(tf.distribute.CrossDeviceOps):
    """Passes every call to TF's real implementation, and records its inputs and outputs."""

    def __init__(self, inner, extended: "_RecordingMirroredExtended"):
        super().__init__()
        self.inner = inner
        self._extended = weakref.proxy(extended)

    @property
    def _num_between_graph_workers(self):
        return self.inner._num_between_graph_workers

    def reduce(self, reduce_op, per_replica_value, destinations, options=None):
        _check_same_shapes([per_replica_value])
        out = self.inner.reduce(reduce_op, per_replica_value, destinations, options)
        self._extended._record_reduction("reduce", reduce_op, [per_replica_value],
                                         [destinations], [out], self.inner, options)
        return out

    def batch_reduce(self, reduce_op, value_destination_pairs, options=None):
        _check_same_shapes([v for v, _ in value_destination_pairs])
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


def _check_same_shapes(values) -> None:
    """Per-replica values of different shapes cannot be summed: say why, before TF's AddN does."""
    for value in values:
        shapes = [t.shape for t in _per_replica_tensors(value)]
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


def _per_replica_tensors(value) -> list:
    """The per-replica (or per-destination) tensors of a distributed value, or [value]."""
    if isinstance(value, values_lib.DistributedValues):
        return list(value.values)
    return [value]


def _destination_name(dest, i: int) -> str:
    if isinstance(dest, (tf.Variable, values_lib.DistributedValues)) and hasattr(dest, "name"):
        try:
            return dest.name.split(":")[0]
        except (AttributeError, ValueError):
            pass
    return f"value {i}"


def _warn_if_identical(trace: Trace, step: int, ins: list[list[np.ndarray]]) -> None:
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


def _warn_out_of_sync(trace: Trace, step: int, name: str, diff: float, aggregation: str) -> None:
    """A MirroredVariable whose copies differ is no longer mirrored: say so, once per variable."""
    message = (
        f"After step {step} the replicas' copies of {name!r} differ by up to {diff:g}, but a "
        "MirroredVariable's copies should be identical. "
        + ("Its aggregation is NONE, so when replicas assign different values each writes only "
           "its own copy. Create it with aggregation=MEAN, SUM or ONLY_FIRST_REPLICA."
           if aggregation == "NONE" else
           "Something wrote to one replica's copy directly; write the variable itself instead.")
    )
    if not any(f"copies of {name!r}" in w for w in trace.warnings):
        warnings.warn(message, stacklevel=2)
    if len(trace.warnings) < 100:
        trace.warnings.append(message)


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
        if isinstance(inner, _RecordingCrossDeviceOps):
            return inner
        if inner is self._cross_device_ops or inner is self._collective_ops:
            key = id(inner)  # long-lived: cache, so TF's identity checks keep holding
            if key not in self._wrappers:
                self._wrappers[key] = _RecordingCrossDeviceOps(inner, self)
            return self._wrappers[key]
        return _RecordingCrossDeviceOps(inner, self)

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
        names = [_destination_name(d, i) for i, d in enumerate(destinations)]
        inputs = [_per_replica_tensors(v) for v in values]  # [tensor][replica]
        results = [_per_replica_tensors(o) for o in outputs]  # [tensor][destination]
        shapes = [tuple(t[0].shape.as_list()) if t[0].shape.is_fully_defined() else None
                  for t in inputs]
        impl = _implementation_name(inner, self, options)
        op = reduce_op.name if hasattr(reduce_op, "name") else str(reduce_op).upper()
        counts = (len(inputs), [len(t) for t in inputs], [len(t) for t in results])

        def record(step, *arrays):
            it = iter(arrays)
            ins = [[next(it) for _ in range(k)] for k in counts[1]]
            outs = [[next(it) for _ in range(k)] for k in counts[2]]
            keep = all(policy.keeps_values(int(np.size(t[0]))) for t in ins)
            if path == "batch_reduce" and op == "SUM":
                _warn_if_identical(trace, step, ins)
            slot = trace._step(step)
            slot.allreduces.append(AllReduceRecord(
                step=step, call=len(slot.allreduces), path=path, reduce_op=op,
                implementation=impl, names=names,
                shapes=[tuple(np.shape(t[0])) for t in ins],
                input_norms=np.array([[_norm(a) for a in t] for t in ins]).reshape(counts[0], -1),
                output_norms=np.array([[_norm(a) for a in t] for t in outs]).reshape(counts[0], -1),
                inputs=[[np.array(a) for a in t] for t in ins] if keep else None,
                outputs=[[np.array(a) for a in t] for t in outs] if keep else None,
            ))

        del shapes
        flat = [t for ts in inputs for t in ts] + [t for ts in results for t in ts]
        self._emitter.emit(self._current_step(), flat, record,
                           always=tf.executing_eagerly() and not self._container_strategy()._in_run)


class MirroredStrategy(tf.distribute.MirroredStrategy):
    """A drop-in ``tf.distribute.MirroredStrategy`` that records a :class:`~mirrortutor.Trace`.

    Same arguments as TF's (``devices``, ``cross_device_ops``), plus ``recording`` to choose how
    much to keep (default: the first 20 steps and a bounded sample after). Use it exactly as TF's:
    ``strategy.scope()``, ``strategy.run``, ``experimental_distribute_dataset``, Keras ``fit``.
    Read ``strategy.trace`` afterwards.
    """

    def __init__(self, devices=None, cross_device_ops=None, *, recording: Recording | None = None):
        self._collective_key_base = next_collective_key_base()
        self.trace = Trace(recording)
        self._in_run = False
        self._variables: list = []  # the distributed variables, for snapshots and the sync check
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
        host = extended._input_workers_devices[0][0]  # the host CPU that feeds the replicas
        with tf.device(host):
            self._step_counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                             name="mirrortutor_step")
        policy = self.trace.recording
        self.trace._steps_run = lambda: int(self._step_counter.numpy())
        self._emitter = Emitter(
            host, policy.keeps,
            lambda s: tf.logical_or(s < policy.first_steps,
                                    tf.equal(tf.math.floormod(s, policy.every), 0)))

    # ---- steps ---------------------------------------------------------------------------------
    def _current_step(self):
        """The step being run: a Python int eagerly, a tensor inside a graph."""
        if tf.executing_eagerly():
            return int(self._step_counter.numpy()) - 1
        return self._step_counter.read_value() - 1

    @tf.autograph.experimental.do_not_convert  # TF's own run is not converted either
    def run(self, fn, args=(), kwargs=None, options=None):
        """``tf.distribute.Strategy.run``, recording shards, outputs and the sync check."""
        if self._in_run:  # nested run: TF handles it; record only the outer one
            return super().run(fn, args=args, kwargs=kwargs, options=options)
        self._step_counter.assign_add(1)
        step = self._current_step()
        self._record_shards(step, args, kwargs)
        self._in_run = True
        try:
            result = super().run(fn, args=args, kwargs=kwargs, options=options)
        finally:
            self._in_run = False
        self._record_outputs(step, result)
        self._record_sync(step)
        return result

    # ---- 1. variables ------------------------------------------------------------------------
    def _on_variable(self, var) -> None:
        components = list(var.values)
        policy = self.trace.recording
        size = int(np.prod(var.shape)) if var.shape.is_fully_defined() else None
        initial = None
        if tf.executing_eagerly() and size is not None and policy.keeps_values(size):
            initial = [c.numpy() for c in components]
        self._variables.append(var)
        self.trace.variables.append(VariableRecord(
            name=var.name.split(":")[0], kind=type(var).__name__,
            shape=tuple(var.shape.as_list()), dtype=var.dtype.name,
            synchronization=var.synchronization.name, aggregation=var.aggregation.name,
            trainable=bool(var.trainable), devices=[c.device for c in components],
            initial_values=initial))

    def snapshot(self, label: str = "") -> list[VariableSnapshot]:
        """Record every replica's copy of every variable now (call it outside ``tf.function``)."""
        step = int(self._step_counter.numpy()) - 1
        shots = [VariableSnapshot(label, step, var.name.split(":")[0],
                                  [c.numpy() for c in var.values]) for var in self._variables]
        self.trace.snapshots.extend(shots)
        return shots

    # ---- 2. shards, outputs and the sync check ----------------------------------------------
    def _record_shards(self, step, args, kwargs) -> None:
        leaves = [x for x in nest.flatten((args, kwargs or {}))
                  if isinstance(x, values_lib.DistributedValues)]
        if not leaves:
            return
        first = leaves[0]
        per_replica = list(first.values)
        has_index = per_replica[0].dtype.is_integer and per_replica[0].shape.rank == 1
        devices = list(self.extended.worker_devices)
        trace = self.trace

        def record(step, *arrays):
            slot = trace._step(step)
            for r, a in enumerate(arrays):
                slot.shards.append(ShardRecord(
                    step=step, replica_id=r, device=devices[r], batch_size=int(np.shape(a)[0]),
                    example_ids=np.array(a, dtype=np.int64) if has_index else None,
                    row_hashes=None if has_index else row_hashes(np.asarray(a))))

        self._emitter.emit(step, per_replica, record)

    def _record_outputs(self, step, result) -> None:
        if result is None:
            return
        if isinstance(result, dict):
            items = [(str(k), v) for k, v in result.items()]
        else:
            flat = nest.flatten(result)
            items = [("output" if len(flat) == 1 else f"output {i}", v) for i, v in enumerate(flat)]
        items = [(k, v) for k, v in items if isinstance(v, (values_lib.DistributedValues, tf.Tensor))]
        if not items:
            return
        tensors = [_per_replica_tensors(v) for _, v in items]
        counts = [len(t) for t in tensors]
        trace = self.trace

        def record(step, *arrays):
            it = iter(arrays)
            slot = trace._step(step)
            for (name, _), k in zip(items, counts):
                slot.outputs.append(OutputRecord(step, name, [np.array(next(it)) for _ in range(k)]))

        self._emitter.emit(step, [t for ts in tensors for t in ts], record)

    def _record_sync(self, step) -> None:
        mirrored = [v for v in self._variables
                    if v.synchronization != tf.VariableSynchronization.ON_READ and v.trainable]
        if not mirrored:
            return
        trace = self.trace
        policy = trace.recording
        keep = [policy.keeps_values(int(np.prod(v.shape))) for v in mirrored]
        names = [v.name.split(":")[0] for v in mirrored]
        counts = [len(v.values) if k else 0 for v, k in zip(mirrored, keep)]

        def tensors():
            diffs = []
            values = []
            for v, k in zip(mirrored, keep):
                comps = [c.read_value() for c in v.values]
                diff = tf.constant(0.0, tf.float64)
                for c in comps[1:]:
                    diff = tf.maximum(diff, tf.cast(tf.reduce_max(tf.abs(c - comps[0])), tf.float64))
                diffs.append(diff)
                if k:
                    values.extend(comps)
            return [tf.stack(diffs), *values]

        aggregations = [v.aggregation.name for v in mirrored]

        def record(step, diffs, *arrays):
            it = iter(arrays)
            slot = trace._step(step)
            for name, d, k, agg in zip(names, diffs, counts, aggregations):
                vals = [np.array(next(it)) for _ in range(k)] if k else None
                slot.sync.append(SyncRecord(step, name, float(d), vals))
                if d > 0:
                    _warn_out_of_sync(trace, step, name, float(d), agg)

        self._emitter.emit(step, tensors, record)
