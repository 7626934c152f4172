"""``mt.MultiWorkerMirroredStrategy``: TensorFlow's multi-worker strategy, with the same trace.

It *is* a ``tf.distribute.MultiWorkerMirroredStrategy`` (a subclass), built on TF's own
``CollectiveAllReduceExtended``, and it observes at the same places as :class:`mt.MirroredStrategy
<mirrortutor.MirroredStrategy>`: variable creation, ``strategy.run`` (shards, outputs, the sync
check) and the cross-device implementation. Here that implementation is ``CollectiveAllReduce``
whose group spans *every replica of every worker*: each worker records its own replicas' inputs
and the all-reduced output, which is the sum over the whole cluster.

Run one copy of the same program on every worker, each with its own ``TF_CONFIG`` (see
:func:`mirrortutor.mwcluster.tf_config`). Each worker's trace holds only its *local* replicas;
:class:`mirrortutor.MultiWorkerRun` merges the workers' traces into one view.

One addition to TF: on CPU, TF gives each worker a single replica (``/device:CPU:0``) however
many logical CPUs it has. ``replicas_per_worker=k`` gives it ``k`` logical CPUs instead (made
by the strategy itself, before TensorFlow's runtime starts: do not call ``mt.setup`` in a worker),
so one machine can stand in for workers with several GPUs each.
"""

from __future__ import annotations

import warnings

import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as collective_lib
from tensorflow.python.eager import context

from . import mirrored
from .errors import ReplicaCountError
from .recording import RecordingStrategy
from .trace import Recording


class _RecordingCollectiveExtended(mirrored._RecordingMirroredExtended,
                                   collective_lib.CollectiveAllReduceExtended):
    """TF's CollectiveAllReduceExtended plus mirrortutor's observation points.

    The method order puts the recording overrides (``_create_variable``, ``_update``,
    ``_get_cross_device_ops``) in front of TF's collective implementation, which they call.
    """

    def __init__(self, container_strategy, cluster_resolver, communication_options,
                 replicas_per_worker: int | None):
        self._wrappers = {}
        self._replicas_per_worker = replicas_per_worker
        collective_lib.CollectiveAllReduceExtended.__init__(
            self, container_strategy, cluster_resolver=cluster_resolver,
            communication_options=communication_options)

    # TF's own _reduce_to (collectives across workers), not MirroredExtended's: it already routes
    # through _get_cross_device_ops, which returns the recording wrapper.
    _reduce_to = collective_lib.CollectiveAllReduceExtended._reduce_to

    def _initialize_local_devices(self, cluster_resolver, worker_device):
        devices, kind = super()._initialize_local_devices(cluster_resolver, worker_device)
        k = self._replicas_per_worker
        if k is None or kind != "CPU":
            return devices, kind
        have = len(tf.config.list_logical_devices("CPU"))
        if k > have:
            raise ReplicaCountError(
                f"replicas_per_worker={k} asked for, but this worker has only {have} logical CPU "
                f"device(s). Call mt.setup({k}) (or more) in the worker before creating the "
                f"strategy, or ask for at most {have} replicas per worker.")
        return tuple(f"{worker_device}/device:CPU:{i}" for i in range(k)), kind


class MultiWorkerMirroredStrategy(RecordingStrategy, tf.distribute.MultiWorkerMirroredStrategy):
    """A drop-in ``tf.distribute.MultiWorkerMirroredStrategy`` that records a trace per worker.

    Same arguments as TF's (``cluster_resolver``, ``communication_options``; by default the cluster
    comes from the ``TF_CONFIG`` environment variable), plus ``replicas_per_worker`` (logical CPUs
    per worker; default: TF's choice, all GPUs or one CPU) and ``recording``. Read
    ``strategy.trace`` afterwards: it holds this worker's replicas; ``strategy.worker_index`` says
    which worker this is and ``strategy.is_chief`` whether it is the chief.
    """

    def __init__(self, cluster_resolver=None, communication_options=None, *,
                 replicas_per_worker: int | None = None, recording: Recording | None = None):
        if replicas_per_worker is not None and (
                isinstance(replicas_per_worker, bool) or not isinstance(replicas_per_worker, int)
                or replicas_per_worker < 1):
            raise ReplicaCountError(
                f"replicas_per_worker must be a whole number of at least 1, but got "
                f"{replicas_per_worker!r}. Each worker needs one replica or more: "
                f"replicas_per_worker=2, for example.")
        if replicas_per_worker is not None:
            _split_cpu(replicas_per_worker)
        self._begin_recording(recording)
        options = communication_options or tf.distribute.experimental.CommunicationOptions()
        extended = _RecordingCollectiveExtended(self, cluster_resolver, options,
                                                replicas_per_worker)
        # Skip TF's __init__, which would build a plain CollectiveAllReduceExtended.
        tf.distribute.Strategy.__init__(self, extended)
        self._attach_step_counter(extended._worker_device)  # this worker's host CPU
        if self.communication == "NCCL" and extended._local_device_type != "GPU":
            message = (
                "CommunicationImplementation.NCCL was asked for, but this worker's replicas are "
                "CPUs and NCCL runs only on NVIDIA GPUs. TensorFlow only logs 'Enabled NCCL "
                "communication but no GPUs detected/specified.' and runs its CPU collectives "
                "instead (here: the same numbers as RING). Use RING (or AUTO) on CPUs.")
            warnings.warn(message, stacklevel=2)
            self.trace.warnings.append(message)

    @property
    def worker_index(self) -> int:
        """This worker's number in the cluster (0 when not in a cluster)."""
        return int(getattr(self.extended, "_id_in_cluster", 0) or 0)

    @property
    def num_workers(self) -> int:
        """How many workers take part in every all-reduce."""
        return int(self.extended._num_workers)

    @property
    def is_chief(self) -> bool:
        """Whether this worker is the chief (worker 0 when the cluster has no "chief" job)."""
        return bool(self.extended._is_chief)

    @property
    def communication(self) -> str:
        """The communication implementation asked for: "AUTO", "RING" or "NCCL"."""
        return self.extended._communication_options.implementation.name

    def stop_health_check(self) -> None:
        """Stop TF's background thread that pings the other workers (before a clean exit)."""
        self.extended._stop_check_health_thread()

    # run, snapshot and the recording itself come from RecordingStrategy, unchanged: they
    # only read this worker's local replicas.


def _split_cpu(replicas: int) -> None:
    """Give this process ``replicas`` logical CPUs, if TensorFlow has not started yet.

    Not ``mt.setup``: that starts TensorFlow's runtime, and a multi-worker strategy must configure
    its collectives *before* the runtime starts ("Collective ops must be configured at program
    startup"). If TF has started already, the strategy uses the logical CPUs that exist.
    """
    if context.context()._context_handle is not None or tf.config.list_physical_devices("GPU"):
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    have = tf.config.get_logical_device_configuration(cpu) or []
    if len(have) < replicas:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])


def in_cluster() -> bool:
    """Whether this process's eager context is connected to a cluster (it cannot be undone)."""
    return context.get_server_def() is not None
