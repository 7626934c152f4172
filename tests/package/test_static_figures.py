"""A stored figure's still image (scripts/static_figures.py): drawn, stable, ignored by nbval."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from pathlib import Path

import nbformat
import plotly.graph_objects as go
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from static_figures import PLOTLY, PNG, WIDTH, Painter, add_images, still  # noqa: E402


def _figure_notebook() -> nbformat.NotebookNode:
    figure = go.Figure(go.Bar(x=["a", "b", "c"], y=[3, 1, 2]), layout={"title": "three bars"})
    out = nbformat.v4.new_output("display_data", data={PLOTLY: figure.to_plotly_json(),
                                                       "text/plain": "a figure"})
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("fig", outputs=[out])])


def test_every_figure_gets_a_drawn_png_the_same_on_every_run():
    """add_images puts beside the figure a PNG WIDTH wide (plotly's default height) with the bars' colours
    in it, leaves the figure's JSON as it was, and draws the same bytes twice (no diff noise)."""
    from PIL import Image

    nb = _figure_notebook()
    figure = dict(nb.cells[0].outputs[0]["data"][PLOTLY])
    with Painter() as painter:
        assert add_images(nb, painter) == 1
        first = nb.cells[0].outputs[0]["data"][PNG]
        add_images(nb, painter)
    data = nb.cells[0].outputs[0]["data"]
    assert data[PNG] == first and data[PLOTLY] == figure
    image = Image.open(io.BytesIO(base64.b64decode(first))).convert("RGB")
    assert image.size == (WIDTH, 450)
    colours = {colour for _, colour in image.getcolors(1 << 16)}
    assert (99, 110, 250) in colours  # plotly's first trace colour, #636efa: the bars are drawn
    assert len(colours) > 10  # and text, axes, background: not a blank picture


def _nbval(tmp_path: Path, stored_text: str) -> subprocess.CompletedProcess:
    """nbval over a one-cell notebook whose stored output holds ``stored_text`` and a PNG that
    the live run does not produce."""
    out = nbformat.v4.new_output("execute_result", data={"text/plain": stored_text,
                                                         PNG: "iVBORw0KGgo="}, execution_count=1)
    cell = nbformat.v4.new_code_cell("'figure'", outputs=[out], execution_count=1)
    path = tmp_path / "still.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--rootdir={tmp_path}", "--nbval", "--nbval-kernel-name", "python3",
                           str(path)], cwd=tmp_path, capture_output=True, text=True)


def test_nbval_compares_the_text_but_not_the_still(tmp_path):
    """nbval (0.11, plugin.py IPyNbFile.skip_compare: 'image/png', 'image/jpeg' unless
    --nbdime) ignores a stored PNG the run does not make, and still fails a changed text."""
    same = _nbval(tmp_path, "'figure'")
    assert same.returncode == 0, same.stdout[-2000:]
    changed = _nbval(tmp_path, "'another figure'")
    assert changed.returncode != 0 and "1 failed" in changed.stdout


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_stored_figure_carries_its_still(path):
    """Every stored plotly figure has its PNG beside it, so GitHub and nbviewer show it
    (`make figures` draws them from the stored figures; `make notebooks` after a re-run)."""
    nb = nbformat.read(path, as_version=4)
    missing = [i for i, cell in enumerate(nb.cells) for out in cell.get("outputs", [])
               if PLOTLY in out.get("data", {}) and PNG not in out["data"]]
    assert not missing, f"{path.name}: cells {missing} have no still: run `make figures`"


@pytest.mark.parametrize("algorithm", ["ring", "reduce_to_one", "halving_doubling"])
def test_an_animation_still_shows_the_reduced_frame_not_the_start(algorithm):
    """An all-reduce animation's still is the frame where the reduction is complete: every
    chunk summed over all 4 ranks on at least one rank, and nothing yet sent back (the start
    frame shows only 1s, which is what a reader without a kernel used to get)."""
    import numpy as np

    import mirrortutor as mt

    figure = mt.allreduce_plots.allreduce_animation(4, algorithm).to_plotly_json()
    drawn = still(figure)
    z = drawn["data"][0]["z"]  # as stored: plotly's typed array ({dtype, bdata, shape})
    z = np.frombuffer(base64.b64decode(z["bdata"]), z["dtype"]).reshape(
        [int(d) for d in str(z["shape"]).split(",")])
    assert (z.max(axis=0) == 4).all()  # every chunk fully summed somewhere
    assert (z < 4).any()  # not the end: the result is not on every rank yet
    name = figure["layout"]["meta"]["still_frame"]
    assert drawn["layout"]["sliders"][0]["active"] == [f["name"] for f in figure["frames"]].index(name)
    assert drawn["layout"]["title"] != figure["layout"]["title"]  # the frame's own title
