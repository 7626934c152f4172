"""The course notebooks stay readable, reviewable and on the public API."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

import mirrortutor as mt

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def _code(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_the_course_has_its_notebooks_in_order():
    """Notebooks are numbered 00, 01, … with no gaps, one idea each; a chapter too long for one
    sitting goes on in a second part lettered after its number (``09b_…``), which shares the
    chapter's exercise."""
    parts = [re.fullmatch(r"(\d\d)(b?)_[a-z0-9_]+\.ipynb", p.name) for p in NOTEBOOKS]
    assert all(parts), [p.name for p, m in zip(NOTEBOOKS, parts) if not m]
    numbers = [int(m.group(1)) for m in parts if not m.group(2)]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 2
    for m in parts:  # a second part follows its chapter's first
        assert not m.group(2) or int(m.group(1)) in numbers


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_starts_with_setup_and_reads_like_a_lecture(path):
    """First code cell imports mirrortutor and calls mt.setup; it opens and closes like a lesson."""
    nb = nbformat.read(path, as_version=4)
    first = _code(nb)[0]
    assert "import mirrortutor as mt" in first and "mt.setup(" in first
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "In this notebook you will see" in text
    assert "What you learned" in text and "Exercise" in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_uses_only_the_public_api(path):
    """Code cells use mt.<public name> only: no private modules or underscore attributes."""
    nb = nbformat.read(path, as_version=4)
    for src in _code(nb):
        assert not re.search(r"\._[A-Za-z]", src), src
        assert not re.search(r"from mirrortutor|import mirrortutor\.", src), src
        for name in re.findall(r"\bmt\.(\w+)", src):
            assert name in mt.__all__, f"mt.{name} is not public"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_small_and_free_of_noise(path):
    """Stored outputs stay small: no widget state, no images but a plotly figure's still (under
    100 kB each, scripts/static_figures.py), under 400 kB in all, no TF log lines."""
    raw = path.read_text()
    assert len(raw) < 400_000
    nb = nbformat.read(path, as_version=4)
    assert "widgets" not in nb.metadata
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data:
                assert "application/vnd.plotly.v1+json" in data, "an image that is no figure's still"
                assert len(data["image/png"]) < 100_000
            assert not re.search(r"^[IWE]0000 ", out.get("text", ""), flags=re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cells_that_raise_are_marked_as_lessons(path):
    """A stored error output appears only in cells tagged raises-exception, and vice versa."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        raised = any(o.output_type == "error" for o in cell.outputs)
        tagged = "raises-exception" in cell.metadata.get("tags", [])
        assert raised == tagged, cell.source


MARKERS = {"NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION", "NBVAL_SKIP"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_nbval_markers_are_spelled_so_nbval_sees_them(path):
    """An NBVAL_ comment stands alone on its line (nbval ignores one followed by other text)."""
    nb = nbformat.read(path, as_version=4)
    for src in _code(nb):
        for line in src.splitlines():
            if "NBVAL_" in line:
                assert line.strip().lstrip("#").strip() in MARKERS, line
                assert src.splitlines().index(line) == 0 or "NBVAL_SKIP" in line, src


EXERCISES = sorted((Path(__file__).resolve().parents[2] / "exercises").glob("*.ipynb"))
#: tqdm's text: "what:  40%|████      | 2/5 [..]"; a widget's repr: "VBox(children=(…".
FROZEN_BAR = re.compile(r"\d+%\|[^|\n]*\|\s*\d+/\d+")
WIDGET_REPR = re.compile(r"^\s*[A-Z]\w*\((children|value|layout|description|options)=")


def unreadable_outputs(nb) -> list[str]:
    """Every stored output a static page would show as a frozen bar, a widget's repr, or a print
    split across two stream outputs (a flushed newline: GitHub shows it as an empty output)."""
    found = []
    for i, cell in enumerate(nb.cells):
        outputs = cell.get("outputs", [])
        for a, b in zip(outputs, outputs[1:]):
            if a.output_type == b.output_type == "stream" and a.name == b.name:
                found.append(f"cell {i}: one {a.name} stream stored as two outputs")
        for out in outputs:
            text = out.get("text", "") + "".join(out.get("data", {}).get("text/plain", ""))
            for line in text.splitlines():
                if FROZEN_BAR.search(line) or WIDGET_REPR.search(line):
                    found.append(f"cell {i}: {line[:80]}")
    return found


def test_the_unreadable_output_check_finds_what_it_is_for():
    """The check below fails on tqdm's frozen first frame, an ipywidgets repr and a split print."""
    bar = "training 8 replica(s):   0%|          | 0/6 [00:00<?, ?epoch/s]"
    box = "VBox(children=(HBox(children=(IntSlider(value=5, description='ranks n'"
    for text in (bar, box):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
            nbformat.v4.new_output("display_data", data={"text/plain": text})])])
        assert unreadable_outputs(nb), text
    split = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="✔ a claim"),
        nbformat.v4.new_output("stream", name="stdout", text="\n")])])
    assert unreadable_outputs(split)
    fine = "training 8 replica(s): progress bar, shown live while the cell runs"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("display_data", data={"text/plain": fine})])])
    assert not unreadable_outputs(nb)


@pytest.mark.parametrize("path", NOTEBOOKS + EXERCISES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_outputs_show_no_frozen_bar_and_no_widget_repr(path):
    """What GitHub or nbviewer shows of a stored output is readable: no progress bar frozen at its
    first frame, no `VBox(children=(…` (mirrortutor.panel gives widgets a text fallback), no
    empty output left by a flush (refresh_notebooks coalesces streams)."""
    found = unreadable_outputs(nbformat.read(path, as_version=4))
    assert not found, f"{path.name}: re-run it (scripts/refresh_notebooks.py): {found}"
