"""``mt.MirroredStrategy``: TensorFlow's MirroredStrategy, with a trace of what it did.

It *is* a ``tf.distribute.MirroredStrategy`` (a subclass) built on TF's own ``MirroredExtended``;
it only adds observation at three places TensorFlow itself routes through:

- variable creation: each MirroredVariable and its per-device components;
- ``strategy.run``: each replica's shard of the batch going in, what each replica returned, and
  afterwards whether every replica still holds the same weights (the sync check);
- the cross-device implementation (``CollectiveAllReduce``, ``ReductionToOneDevice``, …): each
  all-reduce's per-replica inputs and its output, captured around TF's real call.

The hooks into TF's extended object live behind the wall of
:mod:`~mirrortutor.record.tf_internals`; what is recorded, in :mod:`~mirrortutor.record.strategy`.
Collective keys are TensorFlow's, untouched: a second strategy over another number of devices in
one process fails as it does in plain TF ("joining a group with size 3, but that group has size
2"), until the visible line :func:`new_collective_keys` runs before it.
"""

from __future__ import annotations

import tensorflow as tf

from ..devices import strategy_devices
from ..errors import ClusterStateError
from .records import Recording
from .strategy import RecordingStrategy
from .tf_internals.hooks import (ObservedMirroredExtended, allreduce_uses_collectives,
                                 host_device, start_new_collective_keys)
from .tf_internals.cluster import connected_to_cluster


class MirroredStrategy(RecordingStrategy, tf.distribute.MirroredStrategy):
    """A drop-in ``tf.distribute.MirroredStrategy`` that records a :class:`~mirrortutor.Trace`.

    Same arguments as TF's (``devices``, ``cross_device_ops``), plus ``recording`` to choose how
    much to keep (default: the first 20 steps and a bounded sample after). Use it exactly as TF's:
    ``strategy.scope()``, ``strategy.run``, ``experimental_distribute_dataset``, Keras ``fit``.
    Read ``strategy.trace`` afterwards.
    """

    def __init__(self, devices=None, cross_device_ops=None, *, recording: Recording | None = None):
        devices = strategy_devices(devices)  # a device that does not exist: a plain error
        recorder = self._begin_recording(recording)
        extended = ObservedMirroredExtended(self, recorder, devices=devices,
                                            cross_device_ops=cross_device_ops)
        self._would_hang = allreduce_uses_collectives(extended)
        self._num_devices = len(extended.worker_devices)
        self._refuse_after_cluster("create")
        # Skip MirroredStrategy.__init__, which would build a plain MirroredExtended.
        tf.distribute.Strategy.__init__(self, extended)
        if (isinstance(cross_device_ops, tf.distribute.HierarchicalCopyAllReduce)
                and self.num_replicas_in_sync % 2 and self.num_replicas_in_sync > 1):
            # One replica is not affected: CrossDeviceOps.reduce and batch_reduce return before
            # they call the implementation (cross_device_ops.py, lines 310-316 and 431-440).
            # Which sums (TF 2.21): _do_batch_all_reduce in cross_device_ops.py makes the dense
            # ones; int32 values (mirrored_strategy.py, lines 748-749) and reduces to a CPU
            # (lines 777-782) go to a ReductionToOneDevice instead, and stay right.
            self.trace.warn(
                f"TensorFlow's HierarchicalCopyAllReduce adds up two groups of "
                f"{self.num_replicas_in_sync // 2} replica(s), so with an odd number of replicas "
                f"({self.num_replicas_in_sync}) it leaves the last replica's values out of every "
                "sum of dense tensors (not IndexedSlices) it makes: every all-reduce in a step "
                "(batch_reduce_to) of such tensors that are not int32, e.g. gradients, is wrong. "
                "int32 values, and reduces to a CPU such as strategy.reduce, go to a "
                "ReductionToOneDevice instead and stay right "
                "(seen in TF 2.21; chapter 04b shows it). Use an even number of replicas, or "
                "another cross_device_ops.",
                cause="HierarchicalCopyAllReduce, odd")
        # the host CPU that feeds the replicas: where the step counter and callbacks live
        recorder.attach(host_device(extended))

    # ---- a kernel connected to a cluster: a plain error instead of a hang ---------------------
    def _refuse_after_cluster(self, doing: str) -> None:
        """Collective all-reduces hang for ever in a process whose eager context serves a
        parameter-server cluster (seen on TF 2.21, plain TF too): say so before they start."""
        if self._would_hang and connected_to_cluster():
            n = self._num_devices
            raise ClusterStateError(
                f"Cannot {doing} this MirroredStrategy here: this kernel is connected to a "
                f"parameter-server cluster (an mt.LocalCluster started in it, even one stopped "
                f"since, connects it for good), and in such a kernel TensorFlow's collective "
                f"all-reduce over {n} devices does not complete (plain TensorFlow's did not either, when "
                f"this was written; no test runs it). Restart the "
                f"kernel (Kernel → Restart) and run the synchronous part before starting a "
                f"cluster, as chapters 06 and 07 do; or pass "
                f"cross_device_ops=tf.distribute.ReductionToOneDevice(), which works here.")

    def run(self, fn, args=(), kwargs=None, options=None):
        self._refuse_after_cluster("run")
        return super().run(fn, args=args, kwargs=kwargs, options=options)

    def experimental_distribute_dataset(self, dataset, options=None):
        self._refuse_after_cluster("distribute a dataset with")
        return super().experimental_distribute_dataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        self._refuse_after_cluster("distribute a dataset with")
        return super().distribute_datasets_from_function(dataset_fn, options)


def new_collective_keys() -> None:
    """Let the strategies made after this line run collectives in a process where another strategy
    already did: the one visible line a notebook needs to change its replica count, or to make a
    second strategy whose all-reduces have other shapes (same group and instance keys: "Shape
    mismatch in the collective instance" in stock TF too), e.g.::

        mt.new_collective_keys()   # stock TF: a new replica count needs a new process (or this)
        strategy = tf.distribute.MirroredStrategy(devices[:3])

    Why: on CPUs and GPUs, ``MirroredStrategy`` all-reduces with collective ops, which find each
    other by a group key, and every strategy of a process numbers its groups from one base that
    TensorFlow keeps on the class (the details, with TF's lines, are in
    :func:`~mirrortutor.record.tf_internals.hooks.start_new_collective_keys`). So after a
    4-replica all-reduce, a 3-replica one joins the same group and fails, and so does every
    collective after it: ``InternalError: ... is joining a group with size3, but that group has
    size 4 (group_key=1)``. mirrortutor's recording strategy fails in the same way. This line
    moves that base to one no strategy of this process used, as TensorFlow's own tests do between
    strategies. A real training program makes one strategy and needs none of this; a strategy with
    ``cross_device_ops=tf.distribute.ReductionToOneDevice()`` uses no collective keys either.
    """
    start_new_collective_keys()
