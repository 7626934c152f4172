"""Recording strategies in place of TensorFlow's, for as long as a program runs.

A student's program says ``tf.distribute.MirroredStrategy()``; to see what that strategy does, the
program should not have to change. :func:`substituted` puts mirrortutor's recording drop-ins where
the program will look for TensorFlow's classes (the public names ``tf.distribute.MirroredStrategy``,
``tf.distribute.MultiWorkerMirroredStrategy``, ``tf.distribute.ParameterServerStrategy`` and its
``ClusterCoordinator``; see :data:`REPLACED`) and puts TensorFlow's back afterwards::

    with substituted(mt.Recording(timeline=True)) as created:
        runpy.run_path("train.py", run_name="__main__")   # unchanged, plain TensorFlow
    created[0].trace.save("trace.npz")

Nothing else changes: the drop-ins are subclasses of TensorFlow's classes that run TensorFlow's own
code (the numbers are TF's, bit for bit), named as TF's are, so ``isinstance`` checks and printed
class names read as they would without mirrortutor. ``python -m mirrortutor record`` is built on it,
and so is every program the course launches in a cluster of processes.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import tensorflow as tf

from .records import Recording

__all__ = ["REPLACED", "substituted"]

#: The public names replaced: (namespace under ``tf``, attribute).
REPLACED = (("distribute", "MirroredStrategy"), ("distribute", "MultiWorkerMirroredStrategy"),
            ("distribute", "ParameterServerStrategy"),
            ("distribute.experimental", "ParameterServerStrategy"),
            ("distribute.coordinator", "ClusterCoordinator"),
            ("distribute.experimental.coordinator", "ClusterCoordinator"))


def _drop_ins() -> dict[str, type]:
    from .mirrored import MirroredStrategy
    from .multiworker import MultiWorkerMirroredStrategy
    from .parameter_server import ClusterCoordinator, ParameterServerStrategy

    return {"MirroredStrategy": MirroredStrategy,
            "MultiWorkerMirroredStrategy": MultiWorkerMirroredStrategy,
            "ParameterServerStrategy": ParameterServerStrategy,
            "ClusterCoordinator": ClusterCoordinator}


def _namespace(path: str):
    """``tf.distribute.experimental`` for ``"distribute.experimental"``."""
    return functools.reduce(getattr, path.split("."), tf)


def _recording_class(drop_in: type, recording: Recording, created: list) -> type:
    """``drop_in`` with ``recording`` as its default, noting every instance in ``created``.
    A coordinator records into its strategy's trace: it takes no ``recording`` and is not listed."""
    strategy = issubclass(drop_in, tf.distribute.Strategy)

    def __init__(self, *args, **kwargs):
        if strategy:
            kwargs.setdefault("recording", recording)
        drop_in.__init__(self, *args, **kwargs)
        if strategy:
            created.append(self)

    # Named and documented as TensorFlow's class: type(strategy).__name__ reads the same.
    tf_class = next(c for c in drop_in.__mro__ if c.__module__.startswith("tensorflow"))
    return type(drop_in.__name__, (drop_in,), {
        "__init__": __init__, "__doc__": tf_class.__doc__, "__module__": tf_class.__module__,
        "__qualname__": tf_class.__qualname__})


@contextlib.contextmanager
def substituted(recording: Recording | None = None, created: list | None = None
                ) -> Iterator[list]:
    """While the block runs, ``tf.distribute``'s strategies are mirrortutor's recording ones.

    Yields the list of strategies created in the block (in order), filled as they are created
    (``created``, if given, is that list). ``recording``: what every one of them records (default:
    ``mt.Recording()``).
    """
    recording = recording or Recording()
    created = [] if created is None else created
    drop_ins = _drop_ins()
    saved = [(_namespace(space), name, getattr(_namespace(space), name))
             for space, name in REPLACED]
    try:
        for namespace, name, _ in saved:
            setattr(namespace, name, _recording_class(drop_ins[name], recording, created))
        yield created
    finally:
        for namespace, name, original in saved:
            setattr(namespace, name, original)
