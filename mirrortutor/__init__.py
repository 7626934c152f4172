"""mirrortutor: see what ``tf.distribute`` really does.

Start every notebook with::

    import mirrortutor as mt
    devices = mt.setup(8)        # before any other TensorFlow code

then swap ``tf.distribute.MirroredStrategy`` for ``mt.MirroredStrategy`` and read
``strategy.trace``. The public names are listed in ``__all__`` (and in the README).
"""

from __future__ import annotations

import os as _os

# Quieten TensorFlow's C++ logging before TensorFlow is first imported. Students see our one
# plain line from setup() instead.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from .quiet import native_startup_filtered as _native_startup_filtered  # noqa: E402

with _native_startup_filtered():  # TF's import prints start-up lines no setting can silence
    import tensorflow as _tf  # noqa: E402, F401

from . import (  # noqa: E402
    allreduce,
    allreduce_plots,
    costmodel,
    data,
    errors,
    experiments,
    measure,
    plots,
    ps_plots,
    widgets,
)
from .asyncsgd import AsyncSGD, AsyncTrace, Straggler, UpdateRecord  # noqa: E402
from .checks import check  # noqa: E402
from .cluster import ClusterInfo, LocalCluster  # noqa: E402
from .devices import setup  # noqa: E402
from .errors import (  # noqa: E402
    BatchSplitError,
    ClusterConfigError,
    ClusterStateError,
    DevicesAlreadyInitializedError,
    ExposedPortWarning,
    JobConfigError,
    MirrortutorError,
    OutsideScopeError,
    ReplicaCountError,
    UnknownDatasetError,
    WorkerIndexError,
)
from .mirrored import MirroredStrategy  # noqa: E402
from .multiworker import MultiWorkerMirroredStrategy  # noqa: E402
from .mwcluster import MultiWorkerCluster, tf_config  # noqa: E402
from .mwrun import MultiWorkerRun  # noqa: E402
from .mwtraining import TrainingJob, WorkerResult  # noqa: E402
from .mwtraining import train as train_job  # noqa: E402
from .syncsgd import SyncSGD, SyncStep, SyncTrace  # noqa: E402
from .trace import Recording, Trace  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    # set-up, data and exercise checks
    "setup",
    "data",
    "check",
    # the instrumented strategy and what it records
    "MirroredStrategy",
    "Recording",
    "Trace",
    "plots",
    # all-reduce from scratch, its cost, and its speed here
    "allreduce",
    "allreduce_plots",
    "costmodel",
    "measure",
    # scaling experiments and the chapter-5 panel
    "experiments",
    "widgets",
    # a real parameter-server cluster; asynchronous and synchronous training on it
    "LocalCluster",
    "ClusterInfo",
    "AsyncSGD",
    "AsyncTrace",
    "Straggler",
    "UpdateRecord",
    "SyncSGD",
    "SyncTrace",
    "SyncStep",
    "ps_plots",
    # one synchronous job across worker processes
    "MultiWorkerMirroredStrategy",
    "MultiWorkerCluster",
    "MultiWorkerRun",
    "TrainingJob",
    "WorkerResult",
    "train_job",
    "tf_config",
    # errors (every one is in mt.errors; the ones students meet most are here too)
    "errors",
    "MirrortutorError",
    "ReplicaCountError",
    "DevicesAlreadyInitializedError",
    "BatchSplitError",
    "OutsideScopeError",
    "UnknownDatasetError",
    "ClusterConfigError",
    "ClusterStateError",
    "WorkerIndexError",
    "JobConfigError",
    "ExposedPortWarning",
]
