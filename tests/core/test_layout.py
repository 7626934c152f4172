"""The package's layout holds: rooms import in one direction, TensorFlow's internals stay behind
one wall, modules stay small, and the light parts load without TensorFlow.

These read the source (ast) or run a fresh interpreter, so they need no TensorFlow themselves.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mirrortutor"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))

#: Each module's layer: a module may import only from its own layer or lower ones.
#: 0 the numpy core, 1 recording (TensorFlow starts here), 2 what runs on top of it, 3 what shows
#: or grades it. The root __init__ only re-exports lazily and is left out.
LAYERS = {
    "errors": 0, "validate": 0, "tables": 0, "timing": 0, "quiet": 0, "data": 0, "claims": 0, "progress": 0, "panel": 0,
    "collectives": 0, "collectives.simulator": 0, "collectives.allreduce": 0,
    "collectives.costmodel": 0, "collectives.timings": 0,
    "devices": 1, "record": 1, "cli": 3, "__main__": 3,
    "collectives.measure": 2, "training": 2, "clusters": 2,
    "plots": 3, "widgets": 3, "grading": 3,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer(name: str) -> int:
    """The layer of a module: its own entry, else its room's."""
    while name not in LAYERS:
        if "." not in name:
            raise AssertionError(f"mirrortutor.{name} has no layer in LAYERS: add it there")
        name = name.rsplit(".", 1)[0]
    return LAYERS[name]


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, [names])`` for every import of a mirrortutor module in ``path``, anywhere in it."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif (node.module or "").startswith("mirrortutor"):
                target = node.module.removeprefix("mirrortutor").lstrip(".")
            else:
                continue
            names = [a.name for a in node.names]
            if node.module is None:  # "from . import x": x is a module
                found += [(f"{target}.{n}".strip("."), []) for n in names]
            else:
                found.append((target, names))
        elif isinstance(node, ast.Import):
            found += [(a.name.removeprefix("mirrortutor").lstrip("."), []) for a in node.names
                      if a.name.startswith("mirrortutor.")]
    return found


SOURCES = [p for p in MODULES if p != PACKAGE / "__init__.py"]


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_imports_run_one_way(path):
    """No module imports from a higher layer (core <- record <- training/clusters <- plots,
    widgets, grading), and training never imports clusters (clusters run training's jobs)."""
    mine = module_name(path)
    for target, _ in imports_of(path):
        if not target:
            continue
        assert layer(target) <= layer(mine), f"mirrortutor.{mine} imports mirrortutor.{target}"
        if mine.startswith("training"):
            assert not target.startswith("clusters"), f"{mine} imports {target}"


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_no_module_imports_another_modules_private_name(path):
    """``from .x import _y`` never happens: a helper two modules share has a public name."""
    for target, names in imports_of(path):
        private = [n for n in names if n.startswith("_")]
        assert not private, f"{module_name(path)} imports {private} from {target}"


#: The wall: the folder record/tf_internals/ (hooks, graph, cluster).
FENCE = sorted((PACKAGE / "record" / "tf_internals").glob("[!_]*.py"))
TF_PRIVATE_ATTRIBUTES = ("_collective_key_base", "_input_workers_devices", "_communication_options",
                         "_context_handle", "_local_device_type", "_worker_device", "_cluster.stop(",
                         "_id_in_cluster", "_num_workers", "_is_chief", "_use_merge_call",
                         "_cross_device_ops", "_closure_queue", "closure_queue", "failure_handler",
                         "_should_preemption_thread_run", "_queue_lock")


def test_tensorflow_internals_live_behind_one_wall():
    """Only the wall (record/tf_internals/: hooks, graph, cluster) imports
    tensorflow.python or reads TF's private attributes."""
    for path in MODULES:
        if path in FENCE:
            continue
        text = path.read_text()
        assert "tensorflow.python" not in text, path
        for attribute in TF_PRIVATE_ATTRIBUTES:
            assert attribute not in text, f"{path} uses TF's {attribute}"
    assert all("tensorflow.python" in path.read_text() for path in FENCE)


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_modules_stay_small(path):
    """Every module is at most 300 lines: one job each."""
    assert len(path.read_text().splitlines()) <= 300


def test_every_error_class_lives_in_errors():
    """Classes named ...Error or ...Warning are defined in mirrortutor/errors.py only."""
    for path in MODULES:
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                assert not node.name.endswith(("Error", "Warning")), f"{path}: {node.name}"


def fresh_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_numpy_core_runs_without_tensorflow():
    """import mirrortutor, a ring simulation and a cost-model estimate load no TensorFlow,
    plotly or ipywidgets."""
    out = fresh_python("""
        import sys
        import numpy as np
        import mirrortutor as mt
        result = mt.allreduce.ring([np.full(8, r, np.float32) for r in range(4)])
        estimate = mt.costmodel.estimate_step(1e6, 1e-3, 4, "nvlink3-a100")
        data = mt.data.load("linear")
        assert result.values[0][0] == 6 and 0 < estimate.scaling_efficiency <= 1
        print(sorted(m for m in ("tensorflow", "plotly", "ipywidgets", "keras") if m in sys.modules))
    """)
    assert out == "[]"


def test_child_processes_import_only_what_they_run():
    """The cluster agent and the multi-worker launcher load the standard library only."""
    out = fresh_python("""
        import sys
        import mirrortutor.clusters.agent, mirrortutor.clusters.launcher
        print(sorted(m for m in ("tensorflow", "numpy", "plotly", "keras") if m in sys.modules))
    """)
    assert out == "[]"
