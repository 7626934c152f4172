"""mirrortutor: see what ``tf.distribute`` really does.

Start every notebook with::

    import mirrortutor as mt
    devices = mt.setup(8)        # before any other TensorFlow code

then swap ``tf.distribute.MirroredStrategy`` for ``mt.MirroredStrategy`` and read
``strategy.trace``. The public names are listed in ``__all__`` (and in the README).
"""

from __future__ import annotations

import os as _os

# Quieten TensorFlow's C++ start-up chatter before TensorFlow is first imported. Students see
# our one plain line from setup() instead.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from . import (  # noqa: E402
    allreduce,
    allreduce_plots,
    costmodel,
    data,
    errors,
    experiments,
    measure,
    plots,
    widgets,
)
from .devices import setup  # noqa: E402
from .errors import (  # noqa: E402
    BatchSplitError,
    DevicesAlreadyInitializedError,
    MirrortutorError,
    OutsideScopeError,
    ReplicaCountError,
    UnknownDatasetError,
)
from .mirrored import MirroredStrategy  # noqa: E402
from .trace import Recording, Trace  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    # set-up and data
    "setup",
    "data",
    # the instrumented strategy and what it records
    "MirroredStrategy",
    "Recording",
    "Trace",
    "plots",
    # all-reduce from scratch and its cost
    "allreduce",
    "costmodel",
    "measure",
    "allreduce_plots",
    # scaling experiments and the chapter-5 panel
    "experiments",
    "widgets",
    # errors (every one is in mt.errors; the ones students meet most are here too)
    "errors",
    "MirrortutorError",
    "ReplicaCountError",
    "DevicesAlreadyInitializedError",
    "BatchSplitError",
    "OutsideScopeError",
    "UnknownDatasetError",
]
