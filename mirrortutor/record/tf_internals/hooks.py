"""The wall, hooks: where the instrumented strategies hear what TensorFlow does.

The extended objects TensorFlow's own strategies are built on create, update and reduce every
variable; a pass-through cross-device implementation sees every all-reduce. Each tells an
:class:`Observer` (the strategy's recorder, :mod:`mirrortutor.record.recorder`) and nothing more:
this is where a recorded value enters mirrortutor. Checked against TensorFlow 2.21. Each use says
*why* no public API does it.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Protocol

import tensorflow as tf
# Why: MirroredStrategy's extended object is where variables are created, updated and reduced;
# tf.distribute documents no hook there, but TF's own strategies extend these classes.
from tensorflow.python.distribute import collective_all_reduce_strategy as collective_lib
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib
from tensorflow.python.distribute import distribute_utils, mirrored_strategy

__all__ = ["Observer", "ObservedMirroredExtended", "ObservedCollectiveExtended",
           "PassThroughCrossDeviceOps", "allreduce_uses_collectives", "communication",
           "fresh_collective_key_base", "host_device",
           "implementation_name", "local_device_type", "own_collective_keys",
           "plain_mirrored_strategy", "start_new_collective_keys", "worker_host_device"]


class Observer(Protocol):
    """What an instrumented strategy hears from its extended object (see ``record/strategy.py``)."""
    def variable_created(self, variable) -> None: ...
    def reducing(self, values: list) -> None: ...  # before TF reduces: may raise a plain error
    def reduced(self, path: str, reduce_op, values: list, destinations: list, outputs: list,
                implementation: str) -> None: ...  # path: "reduce", "batch_reduce" or "gather"
    def updating(self, variable, args) -> None: ...  # extended.update(variable, fn, args)
    def unmirrored_update(self, variable, num_replicas: int) -> None: ...  # raises


# ---- collective keys ---------------------------------------------------------------------------
# Why: collective ops find each other by group key, and MirroredExtended numbers its groups from
# the class attribute `MirroredStrategy._collective_key_base` + 1 (`_make_collective_ops_with_
# fallbacks`, mirrored_strategy.py). That base is 0 unless set, so every strategy of a process
# shares group 1: a second one over another number of devices joins the first one's group and
# every later collective fails ("joining a group with size 3, but that group has size 2"). TF's
# own tests set the base between strategies (`_mirrored_strategy_with_collective_key_base`,
# strategy_combinations.py). mirrortutor's recording strategy inherits TF's attribute untouched,
# so it fails exactly as TF does; mt.new_collective_keys() is the visible line that sets it.
_KEY_SPACING = 10_000
_key_bases = itertools.count(1)


def fresh_collective_key_base() -> int:
    """A base for collective keys that no strategy in this process has used."""
    return next(_key_bases) * _KEY_SPACING


def start_new_collective_keys() -> int:
    """Set TF's ``MirroredStrategy._collective_key_base`` to a base no strategy used; return it.
    Every MirroredStrategy made afterwards (TF's or mirrortutor's) numbers its groups from it.

    ``MirroredExtended._make_collective_ops_with_fallbacks`` (tensorflow/python/distribute/
    mirrored_strategy.py) builds its ``CollectiveKeys`` with ``group_key_start=1 +
    self._collective_key_base``; the attribute is 0 unless set (marked "Only set this in tests").
    TF's own tests set it between strategies (``_mirrored_strategy_with_collective_key_base``,
    tensorflow/python/distribute/strategy_combinations.py)."""
    base = fresh_collective_key_base()
    tf.distribute.MirroredStrategy._collective_key_base = base
    return base


@contextlib.contextmanager
def own_collective_keys():
    """Strategies made inside get collective keys no other strategy uses, and the base the
    student's next strategy uses is put back on leaving: for the strategies mirrortutor makes
    itself (measurements, references), so they never fail on, or change, the student's keys."""
    cls = tf.distribute.MirroredStrategy
    before = cls.__dict__.get("_collective_key_base", 0)
    cls._collective_key_base = fresh_collective_key_base()
    try:
        yield
    finally:
        cls._collective_key_base = before


def plain_mirrored_strategy(devices, cross_device_ops=None) -> tf.distribute.MirroredStrategy:
    """TensorFlow's own ``MirroredStrategy`` (no recording), with collective keys of its own
    (:func:`own_collective_keys`), for mirrortutor's measurements and references."""
    with own_collective_keys():
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device_ops)


# ---- reading an extended object ------------------------------------------------------------------
def host_device(extended) -> str:
    """The host CPU that feeds a MirroredStrategy's replicas (its input worker)."""
    return extended._input_workers_devices[0][0]


def worker_host_device(extended) -> str:
    """A multi-worker strategy's own host CPU: where its step counter lives."""
    return extended._worker_device


def allreduce_uses_collectives(extended) -> bool:
    """Whether a MirroredStrategy all-reduces with TF's collective ops (its default on CPUs)."""
    return (isinstance(extended._cross_device_ops, cross_device_ops_lib.CollectiveAllReduce)
            and len(extended.worker_devices) > 1)


def communication(extended) -> str:
    """The communication implementation asked of a collective strategy: AUTO, RING or NCCL."""
    return extended._communication_options.implementation.name


def local_device_type(extended) -> str:
    """"CPU" or "GPU": the kind of device a multi-worker strategy's local replicas use."""
    return extended._local_device_type


def implementation_name(inner, extended, options) -> str:
    """A cross-device implementation as the trace names it, e.g. "CollectiveAllReduce (RING)"."""
    name = type(inner).__name__
    if isinstance(inner, cross_device_ops_lib.CollectiveAllReduce):
        name += f" ({extended._communication_options.merge(options).implementation.name})"
    return name


# ---- a cross-device implementation that reports ----------------------------------------------------
class PassThroughCrossDeviceOps(tf.distribute.CrossDeviceOps):
    """Passes every call to TF's real implementation, unchanged, and tells the observer.

    Why private: CrossDeviceOps' gather and replica-context all-reduce are private methods the
    strategies call, and a wrapper must forward them.
    """

    def __init__(self, inner, extended, observer: Observer):
        super().__init__()
        self.inner, self._extended, self._observer = inner, extended, observer

    @property
    def _num_between_graph_workers(self):
        return self.inner._num_between_graph_workers

    def reduce(self, reduce_op, per_replica_value, destinations, options=None):
        self._observer.reducing([per_replica_value])
        out = self.inner.reduce(reduce_op, per_replica_value, destinations, options)
        self._observer.reduced("reduce", reduce_op, [per_replica_value], [destinations], [out],
                               implementation_name(self.inner, self._extended, options))
        return out

    def batch_reduce(self, reduce_op, value_destination_pairs, options=None):
        self._observer.reducing([v for v, _ in value_destination_pairs])
        outs = self.inner.batch_reduce(reduce_op, value_destination_pairs, options)
        values, dests = zip(*value_destination_pairs) if value_destination_pairs else ((), ())
        self._observer.reduced("batch_reduce", reduce_op, list(values), list(dests), list(outs),
                               implementation_name(self.inner, self._extended, options))
        return outs

    def broadcast(self, tensor, destinations):
        return self.inner.broadcast(tensor, destinations)

    def _gather(self, per_replica_value, destinations, axis, options=None):
        out = self.inner._gather(per_replica_value, destinations, axis, options)
        self._observer.reduced("gather", "GATHER", [per_replica_value], [destinations], [out],
                               implementation_name(self.inner, self._extended, options))
        return out

    def _all_reduce(self, reduce_op, value, replica_id, options):
        # Replica-context all-reduce without merge_call: only used under XLA on GPUs, where no
        # Python callback can be compiled in, so it passes through unrecorded.
        return self.inner._all_reduce(reduce_op, value, replica_id, options)


# ---- the extended objects ------------------------------------------------------------------------
def _is_distributed_variable(value) -> bool:  # MirroredVariable, SyncOnReadVariable
    return isinstance(value, tf.distribute.DistributedValues) and isinstance(value, tf.Variable)


class ObservedMirroredExtended(mirrored_strategy.MirroredExtended):
    """TF's MirroredExtended, telling an :class:`Observer` about variables and reductions.

    Why private: ``_create_variable``, ``_update``, ``_get_cross_device_ops`` and ``_reduce_to``
    are the routing points TF's own strategies override; nothing public sees them.
    """

    def __init__(self, container_strategy, observer: Observer, devices=None,
                 cross_device_ops=None):
        self._observer = observer
        self._wrappers: dict[int, PassThroughCrossDeviceOps] = {}
        super().__init__(container_strategy, devices=devices, cross_device_ops=cross_device_ops)

    def _create_variable(self, next_creator, **kwargs):
        var = super()._create_variable(next_creator, **kwargs)
        if _is_distributed_variable(var):
            self._observer.variable_created(var)
        return var

    def _update(self, var, fn, args, kwargs, group):
        if not _is_distributed_variable(var):  # TF would fail a bare assert
            self._observer.unmirrored_update(var, self._num_replicas_in_sync)
        self._observer.updating(var, args)  # every optimizer step comes this way: (var, gradient)
        return super()._update(var, fn, args, kwargs, group)

    def _wrap(self, inner):
        if isinstance(inner, PassThroughCrossDeviceOps):
            return inner
        long_lived = [getattr(self, name, None) for name in
                      ("_cross_device_ops", "_collective_ops", "_host_cross_device_ops")]
        if any(inner is x for x in long_lived if x is not None):
            key = id(inner)  # one wrapper each, so TF's identity checks keep holding
            if key not in self._wrappers:
                self._wrappers[key] = PassThroughCrossDeviceOps(inner, self, self._observer)
            return self._wrappers[key]
        return PassThroughCrossDeviceOps(inner, self, self._observer)

    def _get_cross_device_ops(self, value):
        return self._wrap(super()._get_cross_device_ops(value))

    def _reduce_to(self, reduce_op, value, destinations, options):
        # TF's MirroredExtended._reduce_to, with its inline ReductionToOneDevice() routed through
        # the observer too (on CPU devices every strategy.reduce and MEAN assign goes that way).
        if distribute_utils.is_mirrored(value) and reduce_op == tf.distribute.ReduceOp.MEAN:
            return value
        assert not distribute_utils.is_mirrored(value)  # as TF's: a Mirrored value SUMmed fails

        def get_values(value):
            if not isinstance(value, tf.distribute.DistributedValues):
                return cross_device_ops_lib.reduce_non_distributed_value(
                    reduce_op, value, destinations, self._num_replicas_in_sync)
            if self._use_merge_call() and (
                    not cross_device_ops_lib._devices_match(value, destinations)
                    or any("cpu" in d.lower()
                           for d in cross_device_ops_lib.get_devices_from(destinations))):
                return self._wrap(tf.distribute.ReductionToOneDevice()).reduce(
                    reduce_op, value, destinations)
            return self._get_cross_device_ops(value).reduce(
                reduce_op, value, destinations=destinations,
                options=self._communication_options.merge(options))

        return tf.nest.map_structure(get_values, value)


class ObservedCollectiveExtended(ObservedMirroredExtended,
                                 collective_lib.CollectiveAllReduceExtended):
    """TF's CollectiveAllReduceExtended (multi-worker), observed the same way.

    The method order puts the observing overrides in front of TF's collective implementation,
    which they call. ``replicas_per_worker`` gives a CPU worker that many logical CPUs (TF gives
    it one, ``/device:CPU:0``, however many exist).
    """

    def __init__(self, container_strategy, observer: Observer, cluster_resolver,
                 communication_options, replicas_per_worker: int | None, too_few_devices):
        self._observer = observer
        self._wrappers = {}
        self._replicas_per_worker = replicas_per_worker
        self._too_few_devices = too_few_devices  # (asked, have) -> raises a plain error
        collective_lib.CollectiveAllReduceExtended.__init__(
            self, container_strategy, cluster_resolver=cluster_resolver,
            communication_options=communication_options)

    def _reduce_to(self, reduce_op, value, destinations, options):
        # TF's own CollectiveAllReduceExtended._reduce_to, as it is (collectives across workers;
        # it routes through the observing _get_cross_device_ops). Named here because the
        # observing MirroredExtended version comes first in the method order. It takes one
        # tensor, not a nest: Keras 3 fit fails on it (keras-team/keras#20585), and so it must
        # under this drop-in too: behaving as TF does includes TF's errors.
        return collective_lib.CollectiveAllReduceExtended._reduce_to(
            self, reduce_op, value, destinations, options)

    def _initialize_local_devices(self, cluster_resolver, worker_device):
        devices, kind = super()._initialize_local_devices(cluster_resolver, worker_device)
        k = self._replicas_per_worker
        if k is None or kind != "CPU":
            return devices, kind
        have = len(tf.config.list_logical_devices("CPU"))
        if k > have:
            self._too_few_devices(k, have)
        return tuple(f"{worker_device}/device:CPU:{i}" for i in range(k)), kind
