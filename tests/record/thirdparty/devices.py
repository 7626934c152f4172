"""The plain-TensorFlow twin of ``python -m mirrortutor record --replicas N``: N logical CPUs.

A program's own code is never changed to get replicas on a machine without GPUs; the driver
scripts here call :func:`logical_cpus` before the program starts, and it does nothing when
TensorFlow's CPU is already split (``record --replicas`` did it first).
"""

from __future__ import annotations

import tensorflow as tf


def logical_cpus(n: int) -> None:
    """Split the CPU into ``n`` logical devices unless someone already split it.

    ``get_logical_device_configuration`` reads the request without starting TensorFlow's runtime,
    so this is safe before the program's first op (tf.config: logical devices are fixed at start).
    """
    (cpu,) = tf.config.list_physical_devices("CPU")
    if tf.config.get_logical_device_configuration(cpu) is None:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
