"""mirrortutor: see what ``tf.distribute`` really does.

Start every notebook with::

    import mirrortutor as mt
    devices = mt.setup(8)        # before any other TensorFlow code

then swap ``tf.distribute.MirroredStrategy`` for ``mt.MirroredStrategy`` and read
``strategy.trace``. The public names are listed in ``__all__`` (and in the README).

The package reads like the course's table of contents, one room per part:

- ``collectives/``  all-reduce from scratch, its cost model, and its speed measured here
- ``record/``       the instrumented strategies and the trace they write
- ``training/``     scaling experiments, synchronous and asynchronous SGD
- ``clusters/``     real parameter-server and multi-worker clusters on this machine
- ``plots/``        the course's figures; ``widgets`` its panel
- ``grading/``      exercise checks, release and grading

``import mirrortutor`` itself loads nothing heavy: every public name is imported the first time it
is used (PEP 562), so the numpy-only parts (``mt.allreduce``, ``mt.costmodel``, ``mt.data``) work
without TensorFlow, plotly or ipywidgets, and the child processes of a cluster import only what
they run.
"""

from __future__ import annotations

import importlib
import os as _os
import sys as _sys

# Quieten TensorFlow's C++ logging before TensorFlow is first imported. Students see our one
# plain line from setup() instead.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# plotly's first figure would import rfc3987_syntax (2.6 s), which no figure uses: deferred.py.
from .deferred import defer_rfc3987_syntax as _defer  # noqa: E402

_defer()

__version__ = "0.1.0"

#: Public modules, by the name students use: ``mt.<name>`` -> ``mirrortutor.<module>``.
_MODULES = {"data": "data", "plots": "plots", "allreduce": "collectives.allreduce",
            "allreduce_plots": "plots.allreduce", "costmodel": "collectives.costmodel",
            "measure": "collectives.measure",
            "widgets": "widgets", "ps_plots": "plots.ps", "errors": "errors"}

#: Public classes and functions, by the module that defines them (in course order).
_NAMES = """
devices              setup
grading.checks       check
claims               claim
record.mirrored      MirroredStrategy new_collective_keys
record.records       Recording
record.trace         Trace
record.workers       WorkerTraces
record.parameter_server ParameterServerStrategy ClusterCoordinator
record.notebook      run_program show_program
training.stragglers  straggle
record.ps_trace      ParameterServerTrace
clusters.ps          LocalCluster ClusterInfo
training.diagnose    diagnose
record.multiworker   MultiWorkerMirroredStrategy
clusters.multiworker MultiWorkerCluster tf_config
errors               MirrortutorError ReplicaCountError DevicesAlreadyInitializedError
errors               BatchSplitError OutsideScopeError UnknownDatasetError ClusterConfigError
errors               ClusterStateError WorkerIndexError JobConfigError ClaimError
errors               ExposedPortWarning RecordingTypeError
"""

#: public name -> (module, attribute); attribute None: the module itself.
_PUBLIC: dict[str, tuple[str, str | None]] = {
    **{name: (module, None) for name, module in _MODULES.items()},
    **{(word.split(":") + [word])[1]: (line.split()[0], word.split(":")[0])
       for line in _NAMES.strip().splitlines() for word in line.split()[1:]},
}

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    """Import a public name the first time it is used (PEP 562), then keep it."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mirrortutor' has no attribute {name!r}; the public names "
                             f"are listed in mirrortutor.__all__")
    module_name, attribute = _PUBLIC[name]
    full = f"{__name__}.{module_name}"
    if full not in _sys.modules and "tensorflow" not in _sys.modules:
        # The first import of TensorFlow prints start-up lines no setting can silence.
        from .quiet import native_startup_filtered

        with native_startup_filtered():
            module = importlib.import_module(full)
    else:
        module = importlib.import_module(full)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
