"""``mt.ParameterServerStrategy`` and ``mt.ClusterCoordinator``: TensorFlow's parameter-server
training, with a log of which worker ran each scheduled function, what it read and what it wrote.

Both are subclasses of TensorFlow's classes and run TensorFlow's own code; the program is TF's
tutorial as it stands (``ParameterServerStrategy(cluster_resolver)``, ``ClusterCoordinator``,
``create_per_worker_dataset``, ``schedule``, ``join``). What the recording adds, and nothing else:

- the strategy notes where TF placed each variable it created (which ps task, each shard);
- one variable, ``mirrortutor_version`` (int64, on ps 0, outside TF's round-robin placement), the
  version counter of :mod:`.ps_trace` (read that module's doc for what the versions mean);
- ``schedule(fn, ...)`` schedules, in ``fn``'s place, a ``tf.function`` that runs ``fn``
  unchanged between a read of the counter and an increment of it, and returns, beside ``fn``'s
  own results, the worker's index (``experimental_get_current_worker_index()``), two
  ``tf.timestamp()`` values and the two versions. The program gets a RemoteValue of ``fn``'s
  results alone. The log travels back in the coordinator's own copy of that RemoteValue (TF copies
  each result to the coordinator as soon as its function ends, ``Worker._process_closure`` in
  cluster_coordinator.py), so it survives a worker or ps lost later.

No lock is added: TF runs the program's reads and updates exactly as without the recording, so
the versions say what happened on TensorFlow's parameter server as it is. What the recording does
change: the scheduled function waits for one read of the counter before it starts and does one
increment on ps 0 after it ends (timing, not numbers); TF copies every function's results to
the coordinator, also those the program never fetches; and the coordinator is made with the
strategy, where TF makes it at the strategy's first ``scope()``.

Measured here (2 cores, process-mode ``mt.LocalCluster``): 40 steps of TF's tutorial loop over 2
workers and 2 ps, each logged once, staleness 0 or 1; a worker killed and restarted mid-run left
every schedule logged once and one version counted with no log (TF ran that function again).
"""

from __future__ import annotations

import threading

import tensorflow as tf

from ..errors import RecordingTypeError
from .ps_trace import FailedRecord, ParameterServerTrace, PlacementRecord, ScheduledRecord
from .records import Recording
from .tf_internals.coordinator import finished, observe_variable_creation, unplaced_variable

__all__ = ["ClusterCoordinator", "ParameterServerStrategy", "ps_task", "shards"]

# TensorFlow's classes, taken when this module is first imported (before any substitution).
_TF_STRATEGY = tf.distribute.ParameterServerStrategy
_TF_COORDINATOR = tf.distribute.coordinator.ClusterCoordinator
_TF_REMOTE_VALUE = tf.distribute.experimental.coordinator.RemoteValue

#: Where the version counter lives, and its name: the one named addition to the cluster.
VERSION_DEVICE = "/job:ps/replica:0/task:0/device:CPU:0"
VERSION_NAME = "mirrortutor_version"
_NO_LIMIT = 2**62  # ResourceCountUpTo's limit: never reached


def checked_recording(recording) -> Recording:
    """``recording`` if it is an ``mt.Recording`` (None: the default), else a plain error."""
    if recording is None:
        return Recording()
    if not isinstance(recording, Recording):
        raise RecordingTypeError(
            f"recording= must be an mt.Recording (or None for the default), but got "
            f"{type(recording).__name__} {recording!r:.60}. Pass mt.Recording() or a preset "
            f"such as mt.Recording.everything().")
    return recording


def shards(variable) -> list:
    """A ``ShardedVariable``'s parts (its public ``variables``), or ``[variable]``."""
    parts = getattr(variable, "variables", None)
    return list(parts) if isinstance(parts, (list, tuple)) and parts else [variable]


def ps_task(device: str) -> int:
    """The ps task number in a device string such as ``/job:ps/replica:0/task:1/device:CPU:0``,
    or -1 when the device is not on a ps."""
    spec = tf.DeviceSpec.from_string(device or "")
    return int(spec.task) if spec.job == "ps" and spec.task is not None else -1


class ParameterServerStrategy(_TF_STRATEGY):
    """A drop-in ``tf.distribute.ParameterServerStrategy`` that records a
    :class:`~mirrortutor.record.ps_trace.ParameterServerTrace`.

    Same arguments as TF's (``cluster_resolver``, ``variable_partitioner``), plus ``recording``.
    Use it with a ``ClusterCoordinator`` exactly as with TF's; read ``strategy.trace``. Its
    coordinator is made with it (TF makes one at the first ``scope()``, a recording one here), so
    ``ClusterCoordinator(strategy)``, TF's class or ours, returns the recording coordinator.
    """

    def __init__(self, cluster_resolver, variable_partitioner=None, *,
                 recording: Recording | None = None):
        recording = checked_recording(recording)
        super().__init__(cluster_resolver, variable_partitioner)
        self._trace = ParameterServerTrace(recording)
        observe_variable_creation(self, self._placed)
        self._version = unplaced_variable(VERSION_DEVICE, VERSION_NAME)
        self._trace.version_variable = f"{VERSION_NAME} on {self._version.device}"
        self._pending: list[tuple[int, str, object]] = []  # (order, function name, RemoteValue)
        self._log_lock = threading.Lock()
        # TF keeps one coordinator per strategy and makes its own the first time the scope is
        # entered (ParameterServerStrategyV2Extended._resource_creator_scope), after which
        # ClusterCoordinator(strategy) returns that one. Made now, the recording one is it.
        ClusterCoordinator(self)

    @property
    def trace(self) -> ParameterServerTrace:
        """The trace, with every scheduled function that has finished by now collected."""
        self.collect()
        return self._trace

    def _placed(self, variable) -> None:
        parts = shards(variable)
        devices = [getattr(p, "device", "") or "" for p in parts]
        shape = variable.shape
        name = variable.name.split(":")[0]
        if len(parts) > 1 or parts[0] is not variable:
            # TF names a ShardedVariable "ShardedVariable" (parameter_server_strategy_v2.py,
            # _create_variable passes no name) and its shards "<name>/part_<i>": the program's name
            # is the shards' without the suffix.
            name = parts[0].name.split(":")[0].rsplit("/part_", 1)[0]
        self._trace.placements.append(PlacementRecord(
            name=name, kind=type(variable).__name__,
            shape=tuple(shape.as_list()) if shape.rank is not None else None,
            dtype=variable.dtype.name, trainable=bool(parts[0].trainable), devices=devices,
            ps_tasks=[ps_task(d) for d in devices],
            shard_shapes=[tuple(p.shape.as_list()) for p in parts]))

    # ---- the log of scheduled functions ----------------------------------------------------
    def scheduled(self, name: str, value) -> None:
        """The coordinator scheduled a recorded function whose results ``value`` will hold."""
        with self._log_lock:
            self._pending.append((self._trace.scheduled, name, value))
            self._trace.scheduled += 1

    def collect(self) -> None:
        """Move every finished function's log into the trace (never waits for one)."""
        with self._log_lock:
            still = []
            for order, name, value in self._pending:
                if not finished(value):
                    still.append((order, name, value))
                    continue
                try:
                    worker, started, ended, read, before = value.fetch()["log"]
                except Exception as exc:  # the function failed or was cancelled: TF's error
                    self._trace.failures.append(
                        FailedRecord(order, name, f"{type(exc).__name__}: {exc}"))
                    continue
                self._trace.functions.append(ScheduledRecord(
                    order, name, int(worker), float(started), float(ended), int(read),
                    int(before) + 1))
            self._pending = still
            self._trace.pending = len(still)
            try:
                self._trace.versions_counted = int(self._version.numpy())
            except (tf.errors.OpError, RuntimeError):  # ps 0 gone: keep the last count read
                pass


class _RecordedRemoteValue(_TF_REMOTE_VALUE):
    """What ``schedule`` returns: a RemoteValue of the scheduled function's own results (the
    recording's half of what ran stays with the strategy)."""

    def __init__(self, inner):
        self._inner = inner

    def fetch(self):
        return self._inner.fetch().get("result")

    def get(self):
        return self._inner.get().get("result")


class ClusterCoordinator(_TF_COORDINATOR):
    """A drop-in ``tf.distribute.coordinator.ClusterCoordinator`` for an
    :class:`mt.ParameterServerStrategy <ParameterServerStrategy>`: ``schedule`` logs each function
    it runs into ``strategy.trace`` (collected at ``join()``, ``done()`` and when the trace is
    read). Everything else is TensorFlow's.
    """

    def __new__(cls, strategy):
        if isinstance(strategy, _TF_STRATEGY) and not isinstance(strategy, ParameterServerStrategy):
            raise RecordingTypeError(
                "mt.ClusterCoordinator records into its strategy's trace, but this is TensorFlow's "
                "own ParameterServerStrategy, which keeps none. Create the strategy as "
                "mt.ParameterServerStrategy(cluster_resolver) (or run the program under `python "
                "-m mirrortutor record`), or use tf.distribute.coordinator.ClusterCoordinator.")
        return super().__new__(cls, strategy)

    def __init__(self, strategy):
        if hasattr(self, "_recorded"):  # TF keeps one coordinator per strategy: set up once
            return
        super().__init__(strategy)
        self._recorded: dict[int, tuple] = {}  # id(fn) -> (fn, its recorded tf.function)

    def schedule(self, fn, args=None, kwargs=None):
        functions = (tf.types.experimental.PolymorphicFunction,
                     tf.types.experimental.ConcreteFunction)
        if not isinstance(fn, functions):  # TF's own TypeError says what to pass
            return super().schedule(fn, args=args, kwargs=kwargs)
        value = super().schedule(self._recorded_function(fn), args=args, kwargs=kwargs)
        self.strategy.scheduled(getattr(fn, "__name__", None) or getattr(fn, "name", "fn"),
                                value)
        return _RecordedRemoteValue(value)

    def join(self):
        try:
            super().join()
        finally:
            self.strategy.collect()

    def done(self):
        try:
            return super().done()
        finally:
            self.strategy.collect()

    def _recorded_function(self, fn):
        """``fn`` between a read of the version counter and an increment of it (see the module
        doc); one per ``fn``, so TF traces it as often as it would trace ``fn``."""
        if id(fn) in self._recorded:
            return self._recorded[id(fn)][1]
        version = self.strategy._version

        def recorded(*args, **kwargs):
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            started = tf.timestamp()
            with tf.control_dependencies([started]):
                read = version.read_value()  # before any op of fn
            graph = tf.compat.v1.get_default_graph()
            first = len(graph.get_operations())
            with tf.control_dependencies([read]):
                result = fn(*args, **kwargs)
            with tf.control_dependencies(graph.get_operations()[first:]):  # after all of fn
                before = tf.raw_ops.ResourceCountUpTo(resource=version.handle, limit=_NO_LIMIT,
                                                      T=tf.int64)
            with tf.control_dependencies([before]):
                ended = tf.timestamp()
            log = (tf.cast(worker, tf.int64), started, ended, read, before)
            # A function returning None: TF copies no result (a None inside a structure fails).
            return {"log": log} if result is None else {"log": log, "result": result}

        recorded.__name__ = f"recorded_{getattr(fn, '__name__', 'fn')}"
        wrapped = tf.function(recorded, autograph=False)
        self._recorded[id(fn)] = (fn, wrapped)
        return wrapped
