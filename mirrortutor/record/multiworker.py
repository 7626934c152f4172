"""``mt.MultiWorkerMirroredStrategy``: TensorFlow's multi-worker strategy, with the same trace.

It *is* a ``tf.distribute.MultiWorkerMirroredStrategy`` (a subclass), built on TF's own
``CollectiveAllReduceExtended``, and it observes at the same places as :class:`mt.MirroredStrategy
<mirrortutor.MirroredStrategy>`: variable creation, ``strategy.run`` (shards, outputs, the sync
check) and the cross-device implementation. Here that implementation is ``CollectiveAllReduce``
whose group spans *every replica of every worker*: each worker records its own replicas' inputs
and the all-reduced output, which is the sum over the whole cluster.

Run one copy of the same program on every worker, each with its own ``TF_CONFIG`` (see
:func:`mirrortutor.tf_config`). Each worker's trace holds only its *local* replicas;
:class:`mirrortutor.WorkerTraces` puts the workers' traces side by side. Which worker this
is, and whether it is the chief, TensorFlow says publicly: ``strategy.cluster_resolver.task_id``
and ``strategy.extended.should_checkpoint``.

It behaves as TF's class does, errors included: Keras 3 ``fit`` fails under it exactly as under
``tf.distribute.MultiWorkerMirroredStrategy`` in TF 2.21 / Keras 3.15 (keras-team/keras#20585; a
test compares the two). One addition, asked for by name: on CPU, TF gives each worker a single
replica (``/device:CPU:0``) however many logical CPUs it has; ``replicas_per_worker=k`` gives it
``k`` logical CPUs instead (made by the strategy itself, before TensorFlow's runtime starts: do
not call ``mt.setup`` in a worker), so one machine can stand in for workers with several GPUs
each. Without that argument the replicas are TF's own choice.
"""

from __future__ import annotations

import tensorflow as tf

from ..devices import split_cpu_before_start
from ..errors import ReplicaCountError
from ..validate import whole_number
from .records import Recording
from .strategy import RecordingStrategy
from .tf_internals.hooks import (ObservedCollectiveExtended, communication, local_device_type,
                                 worker_host_device)


def _too_few_devices(asked: int, have: int) -> None:
    raise ReplicaCountError(
        f"replicas_per_worker={asked} asked for, but this worker has only {have} logical CPU "
        f"device(s). Call mt.setup({asked}) (or more) in the worker before creating the "
        f"strategy, or ask for at most {have} replicas per worker.")


class MultiWorkerMirroredStrategy(RecordingStrategy, tf.distribute.MultiWorkerMirroredStrategy):
    """A drop-in ``tf.distribute.MultiWorkerMirroredStrategy`` that records a trace per worker.

    Same arguments as TF's (``cluster_resolver``, ``communication_options``; by default the cluster
    comes from the ``TF_CONFIG`` environment variable), plus ``replicas_per_worker`` (logical CPUs
    per worker; default: TF's choice, all GPUs or one CPU) and ``recording``. Read
    ``strategy.trace`` afterwards: it holds this worker's replicas.
    """

    def __init__(self, cluster_resolver=None, communication_options=None, *,
                 replicas_per_worker: int | None = None, recording: Recording | None = None):
        if replicas_per_worker is not None:
            whole_number(replicas_per_worker, ReplicaCountError,
                         f"replicas_per_worker must be a whole number of at least 1, but got "
                         f"{replicas_per_worker!r}. Each worker needs one replica or more: "
                         f"replicas_per_worker=2, for example.")
            split_cpu_before_start(replicas_per_worker)
        recorder = self._begin_recording(recording)
        options = communication_options or tf.distribute.experimental.CommunicationOptions()
        extended = ObservedCollectiveExtended(self, recorder, cluster_resolver, options,
                                              replicas_per_worker, _too_few_devices)
        # Skip TF's __init__, which would build a plain CollectiveAllReduceExtended.
        tf.distribute.Strategy.__init__(self, extended)
        recorder.attach(worker_host_device(extended))  # this worker's host CPU
        self.trace.worker = self.cluster_resolver.task_id  # TF_CONFIG's task index
        if self.communication == "NCCL" and local_device_type(extended) != "GPU":
            message = (
                "CommunicationImplementation.NCCL was asked for, but this worker's replicas are "
                "CPUs and NCCL runs only on NVIDIA GPUs. TensorFlow only logs 'Enabled NCCL "
                "communication but no GPUs detected/specified.' (_warn_nccl_no_gpu); its "
                "CommunicationImplementation docstring says all-reduce on CPU falls back to RING. "
                "Use RING (or AUTO) on CPUs.")
            self.trace.warn(message, cause="NCCL on CPUs")

    @property
    def communication(self) -> str:
        """The communication implementation asked for: "AUTO", "RING" or "NCCL"."""
        return communication(self.extended)

    # run, snapshot and the recording itself come from RecordingStrategy, unchanged: they
    # only read this worker's local replicas.
