"""Give TensorFlow its replicas before anything else touches it.

``tf.distribute`` makes one replica per device. A laptop has one CPU device and no GPU, so on its own
it can only show a one-replica world. TensorFlow can split the physical CPU into several *logical*
devices (``tf.config.set_logical_device_configuration``) — but only before its runtime starts, which
happens at the first op. :func:`setup` does that split (or picks the real GPUs when there are some)
and says in one plain line what the student got.

Logical CPU replicas share the same physical cores: they show *what* ``tf.distribute`` does, never
how fast GPUs would do it.
"""

from __future__ import annotations

import tensorflow as tf

from .errors import DeviceError, DevicesAlreadyInitializedError, ReplicaCountError
from .quiet import native_startup_filtered
from .timing import physical_cores
from .validate import is_whole

#: How many logical CPU replicas :func:`setup` will make at most. More adds threads and memory on
#: the same few cores and teaches nothing new (the course never needs more than 8).
MAX_CPU_REPLICAS = 16

#: Default replica count on a machine without GPUs: enough for every chapter (they sweep 1 to 8).
DEFAULT_CPU_REPLICAS = 8


def _check_count(replicas: object) -> int:
    if not is_whole(replicas):
        raise ReplicaCountError(
            f"replicas must be a whole number such as 4, but got {replicas!r} "
            f"({type(replicas).__name__}). Call mt.setup(4), for example."
        )
    if replicas < 1:
        raise ReplicaCountError(
            f"replicas must be at least 1, but got {replicas}. A strategy needs one replica per "
            "device; call mt.setup(4), for example."
        )
    return replicas


def _restart_message(asked: int, have: int, kind: str) -> str:
    return (
        f"{asked} replicas asked for, but TensorFlow has already started with {have} {kind} "
        f"device(s), and its devices cannot change after that. Restart the kernel "
        f"(Kernel → Restart) and call mt.setup({asked}) first, before any other TensorFlow code."
    )


def _enough_inter_op_threads(replicas: int) -> None:
    """Give TF's inter-op pool room for every replica's blocking collective.

    By default the pool has one thread per physical core. Collective all-reduces block a thread
    while they wait for their peers, so 8 replicas on 2 cores can wait on each other forever
    (seen: a Keras predict stalled under MirroredStrategy). Only scheduling changes, never a
    kernel's arithmetic. Possible only before TF starts; afterwards this does nothing.
    """
    if tf.config.threading.get_inter_op_parallelism_threads() == 0:
        try:
            tf.config.threading.set_inter_op_parallelism_threads(max(8, 2 * replicas))
        except RuntimeError:
            pass  # TF already started: keep what it has


def _setup_cpu(replicas: int) -> list[str]:
    if replicas > MAX_CPU_REPLICAS:
        raise ReplicaCountError(
            f"{replicas} CPU replicas asked for, but mirrortutor makes at most {MAX_CPU_REPLICAS} "
            f"logical CPU devices: they all share {physical_cores()} CPU core(s), so more "
            f"would only be slower. Ask for {MAX_CPU_REPLICAS} or fewer."
        )
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu) or []
    _enough_inter_op_threads(replicas)
    if len(current) < replicas:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
            )
        except RuntimeError:
            have = len(tf.config.list_logical_devices("CPU"))
            if have < replicas:
                raise DevicesAlreadyInitializedError(
                    _restart_message(replicas, have, "CPU")
                ) from None
    names = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    if len(names) < replicas:  # configured by someone else before TF started
        raise DevicesAlreadyInitializedError(_restart_message(replicas, len(names), "CPU"))
    return names


def _setup_gpu(replicas: int, gpus: list, split_gpu: bool, gpu_memory_mb: int) -> list[str]:
    if len(gpus) == 1 and split_gpu and replicas > 1:
        config = [tf.config.LogicalDeviceConfiguration(memory_limit=gpu_memory_mb)] * replicas
        try:
            tf.config.set_logical_device_configuration(gpus[0], config)
        except RuntimeError:
            pass  # already started: the count check below says what to do
    logical = [d.name for d in tf.config.list_logical_devices("GPU")]
    if replicas > len(logical):
        hint = (
            " With one GPU you can carve logical GPUs from it: mt.setup(n, split_gpu=True) in a "
            "fresh kernel."
            if len(gpus) == 1
            else ""
        )
        raise ReplicaCountError(
            f"{replicas} GPU replicas asked for, but this machine has {len(logical)} GPU "
            f"device(s). Ask for {len(logical)} or fewer.{hint}"
        )
    return logical[:replicas]


def setup(
    replicas: int | None = None,
    *,
    use_gpus: bool = True,
    split_gpu: bool = False,
    gpu_memory_mb: int = 1024,
    quiet: bool = False,
    plotly_renderer: str | None = "plotly_mimetype",
) -> list[str]:
    """Give TensorFlow ``replicas`` devices and return their names, in replica order.

    Call it first, before any other TensorFlow code. Without a GPU (or with ``use_gpus=False``) it
    splits the CPU into ``replicas`` logical devices. With GPUs it uses the real ones; with exactly
    one GPU and ``split_gpu=True`` it carves ``replicas`` logical GPUs of ``gpu_memory_mb`` each.

    It also points plotly at ``plotly_renderer``: the default, ``plotly_mimetype``, draws offline
    and gives the same output every run (``None`` leaves plotly alone).

    Calling it again with the same or fewer replicas is harmless and returns the first
    ``replicas`` devices. Asking for more once TensorFlow has started raises
    :class:`~mirrortutor.errors.DevicesAlreadyInitializedError`, which says to restart the kernel.

    >>> devices = mt.setup(4)            # doctest: +SKIP
    4 logical CPU replicas on 2 CPU cores: they show what happens, not GPU speed.
    """
    with native_startup_filtered():  # listing GPUs logs "failed call to cuInit" on a CPU laptop
        gpus = tf.config.list_physical_devices("GPU") if use_gpus else []
    if replicas is None:
        replicas = len(gpus) if gpus and not split_gpu else DEFAULT_CPU_REPLICAS
    replicas = _check_count(replicas)
    if gpus:
        names = _setup_gpu(replicas, gpus, split_gpu, gpu_memory_mb)
        kind = "logical GPU" if split_gpu and len(gpus) == 1 and replicas > 1 else "GPU"
        line = f"{replicas} {kind} replica(s): real GPU devices."
    else:
        with native_startup_filtered():  # the runtime's start prints CPU-feature lines
            names = _setup_cpu(replicas)
        line = (
            f"{replicas} logical CPU replica(s) on {physical_cores()} CPU core(s): "
            "they show what happens, not GPU speed."
        )
    # TF's Python INFO/WARNING lines ("Using MirroredStrategy with devices ...") would drown our
    # one plain line; errors still show.
    tf.get_logger().setLevel("ERROR")
    if plotly_renderer is not None:
        import plotly.io as pio

        pio.renderers.default = plotly_renderer
    if not quiet:
        print(line)
    return names


def split_cpu_before_start(replicas: int) -> bool:
    """Give this process ``replicas`` logical CPUs, if TensorFlow's runtime has not started and
    there is no GPU; return whether the CPUs are now split that way.

    Not :func:`setup`: that starts TensorFlow's runtime, and a multi-worker strategy must configure
    its collectives *before* the runtime starts ("Collective ops must be configured at program
    startup"). ``python -m mirrortutor record --replicas N`` uses it for the same reason: the
    program it runs may create a ``MultiWorkerMirroredStrategy``.
    """
    from .record.tf_internals.cluster import runtime_started

    if runtime_started() or tf.config.list_physical_devices("GPU"):
        return False
    cpu = tf.config.list_physical_devices("CPU")[0]
    have = tf.config.get_logical_device_configuration(cpu) or []
    if len(have) < replicas:
        _enough_inter_op_threads(replicas)
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])
    return True


# ---- a strategy's device list -----------------------------------------------------------------
def _short(name: str) -> str:
    return name.rsplit("device:", 1)[-1]


def strategy_devices(devices) -> list[str] | None:
    """Check a ``MirroredStrategy`` device list against the devices TensorFlow has; return it.

    TensorFlow itself takes ``["/cpu:99"]`` (or ``["/gpu:0"]`` with no GPU) and runs that replica
    on CPU:0 while every record names the device asked for; it takes ``[]`` as "every device",
    and answers a repeat with a bare ``AssertionError`` and a bare string with "Unknown attribute".
    ``None`` means every device, as in TensorFlow.
    """
    if devices is None:
        return None
    have = [d.name for d in tf.config.list_logical_devices() if d.device_type in ("CPU", "GPU")]
    exist = (f"The devices that exist here: {', '.join(_short(n) for n in have)} "
             f"(mt.setup returns their names: devices = mt.setup(4), then devices[:2]).")
    if isinstance(devices, (str, bytes, tf.DeviceSpec)):
        raise DeviceError(
            f"devices must be a list of device names, but got one name, {devices!r}. Put it in "
            f"a list: mt.MirroredStrategy([{str(devices)!r}]). {exist}")
    try:
        devices = list(devices)
    except TypeError:
        raise DeviceError(f"devices must be a list of device names, but got {devices!r}. "
                          f"{exist}") from None
    if not devices:
        raise DeviceError(
            "devices is an empty list, but a strategy needs at least one device (TensorFlow "
            "would quietly use every device instead). Pass some devices, or devices=None for "
            f"all of them. {exist}")
    known = {}
    for name in have:
        spec = tf.DeviceSpec.from_string(name)
        known[(spec.device_type, spec.device_index)] = name
    local_jobs = {None, "localhost", tf.DeviceSpec.from_string(have[0]).job}
    seen: dict[tuple, str] = {}
    for device in devices:
        # TF takes DeviceSpecs and LogicalDevices (tf.config.list_logical_devices()) as well.
        text = device.to_string() if isinstance(device, tf.DeviceSpec) else \
            device.name if isinstance(device, tf.config.LogicalDevice) else device
        try:
            spec = tf.DeviceSpec.from_string(text) if isinstance(text, str) else None
        except ValueError:
            spec = None
        if spec is None or spec.device_type is None:
            raise DeviceError(f"{device!r} is not a device name: write devices like '/cpu:0', "
                              f"'/gpu:1' or '/device:CPU:2'. {exist}")
        if spec.job not in local_jobs or spec.task not in (None, 0):
            raise DeviceError(
                f"{device!r} is a device of another task; MirroredStrategy uses this machine's "
                f"devices only (for several machines, see mt.MultiWorkerCluster). {exist}")
        key = (spec.device_type.upper(), spec.device_index)
        if spec.device_index is None:
            raise DeviceError(f"{device!r} names a kind of device, not one device: add its "
                              f"number, e.g. '{text}:0'. {exist}")
        if key not in known:
            kind = key[0]
            missing = sum(1 for k in known if k[0] == kind)
            why = (f"this machine has no {kind} TensorFlow can use" if not missing else
                   f"TensorFlow has {missing} {kind} device(s), {kind}:0 to {kind}:{missing - 1}")
            fix = ("mt.setup(n) makes n logical CPUs (first thing in a fresh kernel). "
                   if kind == "CPU" else "Use the CPU devices instead. ")
            raise DeviceError(
                f"{device!r} does not exist: {why}. TensorFlow would run that replica on another "
                f"device and still call it {_short(text.upper())}, so every record of it would "
                f"be wrong. {fix}{exist}")
        if key in seen:
            raise DeviceError(
                f"{seen[key]!r} and {device!r} are the same device ({_short(known[key])}); each "
                f"replica needs a device of its own. Remove the repeat. {exist}")
        seen[key] = device
    return [d.to_string() if isinstance(d, tf.DeviceSpec) else d for d in devices]
