"""Plain TensorFlow on every page: no chapter or exercise trains inside a mirrortutor loop.

The training each lesson draws its conclusions from is TensorFlow the student reads: in the
notebook's cells, or in a program under ``programs/`` that the notebook shows (``mt.show_program``)
before it runs it (``mt.run_program``, ``cluster.run_program``). mirrortutor observes, launches,
models, plots and grades. This test reads every notebook's code and fails on a call to one of the
training loops the course used to hide its TensorFlow in, and on a program run without its source
shown first.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "exercises").glob("*.ipynb"))

#: mirrortutor's former training loops: a chapter that calls one trains in the student's place.
LOOPS = {"SyncSGD", "AsyncSGD", "TrainingJob", "train_job", "run_scaling", "sweep",
         "StrategyComparison", "compare_strategies", "experiments"}


def _code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines = ("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    # IPython's magics and shell lines are not Python: leave them out of the parse.
    return "\n".join(line for cell in lines for line in cell.splitlines()
                     if not line.lstrip().startswith(("%", "!")))


def _names(tree: ast.AST) -> set[str]:
    """Every ``mt.X`` attribute used, and every name imported from mirrortutor."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "mt":
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mirrortutor"):
            used.update(alias.name for alias in node.names)
            used.update(part for part in node.module.split(".")[1:])
    return used


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_notebook_trains_in_a_mirrortutor_loop(path):
    used = _names(ast.parse(_code(path)))
    loops = sorted(used & LOOPS)
    assert not loops, f"{path.name} trains inside mirrortutor's {loops}: write the TensorFlow on " \
                      f"the page (cells, or a program under programs/ shown with mt.show_program)"


def _where(program: str) -> str:
    """``../programs/x.py`` (from the notebooks' folder) and ``programs/x.py`` are one file."""
    return program[3:] if program.startswith("../") else program


def _shown(code: str) -> set[str]:
    return {_where(p) for p in re.findall(r"show_program\(\s*['\"]([^'\"]+)['\"]", code)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_program_a_notebook_runs_is_shown_first(path):
    """A chapter shows a program's source before it runs it; an exercise may run one its chapter
    showed."""
    code = _code(path)
    chapter = ROOT / "notebooks" / path.name
    known = _shown(_code(chapter)) if path.parent.name == "exercises" and chapter.is_file() \
        else set()
    for match in re.finditer(r"run_program\(\s*['\"]([^'\"]+)['\"]", code):
        program = _where(match.group(1))
        shown_before = _shown(code[:match.start()])
        assert program in shown_before | known, (
            f"{path.name} runs {program} without showing its source first (mt.show_program, "
            f"here or, for an exercise, in its chapter)")
        assert (ROOT / program).is_file(), f"{path.name} runs {program}, which does not exist"
