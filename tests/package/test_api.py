"""The public API is exactly the documented set, and the README lists it."""

from __future__ import annotations

import re
from pathlib import Path

import mirrortutor as mt

DOCUMENTED = {
    "setup", "data", "MirroredStrategy", "Recording", "Trace", "plots", "allreduce", "costmodel",
    "measure", "allreduce_plots", "widgets", "errors", "MirrortutorError", "ReplicaCountError", "DevicesAlreadyInitializedError",
    "BatchSplitError", "OutsideScopeError", "UnknownDatasetError",
    "LocalCluster", "ClusterInfo",
    "ClusterConfigError", "ClusterStateError", "WorkerIndexError", "ExposedPortWarning",
    "check", "MultiWorkerMirroredStrategy", "WorkerTraces", "MultiWorkerCluster",
    "tf_config", "JobConfigError",
    "ps_plots", "claim", "ClaimError", "diagnose",
    "ParameterServerStrategy", "ClusterCoordinator", "ParameterServerTrace", "RecordingTypeError",
    "run_program", "show_program", "straggle", "new_collective_keys",
}
README = Path(__file__).resolve().parents[2] / "README.md"


def test_all_is_exactly_the_documented_set():
    """mirrortutor.__all__ names exactly the documented public API, and each name exists."""
    assert set(mt.__all__) == DOCUMENTED
    assert len(mt.__all__) == len(set(mt.__all__))
    for name in mt.__all__:
        assert hasattr(mt, name), name


def test_readme_api_table_lists_every_public_name():
    """Every public name appears in the README's API table, and the table names nothing else."""
    table = README.read_text().split("The public API")[1].split("\n## ")[0]
    first_column = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `")]
    listed = {name for cell in first_column for name in re.findall(r"`(\w+)", cell)}
    listed |= set(re.findall(r"`(\w+(?:Error|Warning))`", table))
    assert listed == DOCUMENTED


def test_every_error_is_a_mirrortutor_error_and_a_builtin():
    """Each error class derives from MirrortutorError and from ValueError, RuntimeError, TypeError,
    OSError (a file that cannot be written) or (a claim the data no longer supports)
    AssertionError."""
    errors = [getattr(mt.errors, n) for n in dir(mt.errors) if n.endswith("Error")]
    assert len(errors) > 5
    for cls in errors:
        assert issubclass(cls, mt.MirrortutorError)
        if cls is not mt.MirrortutorError:
            assert issubclass(cls, (ValueError, RuntimeError, TypeError, OSError,
                                    AssertionError)), cls
