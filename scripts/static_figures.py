"""Give every stored plotly figure a still image beside it, so notebooks read as files show it.

Usage: python scripts/static_figures.py notebooks/*.ipynb   (scripts/refresh_notebooks.py runs it
after every re-run; run it by hand after merging notebooks refreshed without it)

A chapter's figure is stored as ``application/vnd.plotly.v1+json``: JupyterLab draws it, but
GitHub, nbviewer and nbconvert know no renderer for that mimetype and show nothing. This adds an
``image/png`` to the same output bundle, drawn from the stored JSON (nothing re-runs): a reader of
the file sees the PNG, JupyterLab still picks the interactive figure, and nbval never compares
either (it skips image mimetypes, and cannot compare plotly's JSON as text).

The still is drawn at least :data:`WIDTH` pixels wide: the course's footnotes are wrapped for a
notebook's width, and plotly's default 700 px (or a figure's own narrower width) cut their ends off. An
animated figure shows the frame its ``layout.meta.still_frame`` names (the all-reduce animations
name the step where the reduction is complete), else its last: the first is only the start.

The picture is what plotly.js itself draws: the ``plotly.min.js`` shipped inside the plotly
package, in Debian's Chromium driven by Playwright (as tests/package/test_browser.py does),
through ``Plotly.toImage``. That is what kaleido does too; kaleido 1.x would also need a Chrome,
and adds a dependency for nothing this does not.
"""

from __future__ import annotations

import base64
import io
import shutil
import sys
from pathlib import Path

import nbformat

PLOTLY = "application/vnd.plotly.v1+json"
PNG = "image/png"
WIDTH = 860  # px at least (plotly's own default, 700, and narrower figures clip footnotes)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def plotly_js() -> Path:
    """plotly.js as the plotly package ships it (the version its Python side was built for)."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def still(figure: dict) -> dict:
    """What to draw of ``figure``: itself, or for an animation one frame of it (module doc)."""
    frames = figure.get("frames") or []
    layout = dict(figure.get("layout") or {})
    if not frames:
        return {"data": figure.get("data") or [], "layout": layout}
    name = (layout.get("meta") or {}).get("still_frame")
    frame = next((f for f in frames if f.get("name") == name), frames[-1])
    data = [dict(trace) for trace in figure.get("data") or []]
    for i, trace in zip(frame.get("traces") or range(len(frame.get("data") or [])),
                        frame.get("data") or []):
        if i < len(data):
            data[i] = {**data[i], **trace}
    layout.update(frame.get("layout") or {})
    position = [f.get("name") for f in frames].index(frame.get("name"))
    layout["sliders"] = [{**slider, "active": position} for slider in layout.get("sliders") or []]
    return {"data": data, "layout": layout}


def figure_outputs(nb: nbformat.NotebookNode) -> list[dict]:
    """Every stored output of ``nb`` that carries a plotly figure, in order."""
    return [out for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if PLOTLY in out.get("data", {})]


class Painter:
    """One headless Chromium with plotly.js loaded, turning figure JSON into PNG bytes."""

    def __enter__(self) -> "Painter":
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM,
                                                         args=CHROMIUM_ARGS)
        self._page = self._browser.new_page()
        self._page.add_script_tag(path=str(plotly_js()))
        return self

    def png(self, figure: dict) -> bytes:
        """The figure's :func:`still` as plotly.js draws it, at least :data:`WIDTH` wide (height:
        the layout's, or plotly's default 450), stored with a palette of
        256 colours: a quarter of the bytes, no visible change on plotly's flat colours."""
        from PIL import Image

        drawn = still(figure)
        size = {"width": max(drawn["layout"].get("width") or 0, WIDTH)}
        url = self._page.evaluate(
            "([fig, size]) => Plotly.toImage(fig, {format: 'png', ...size})", [drawn, size])
        drawn = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
        stored = io.BytesIO()
        drawn.quantize(256).save(stored, "PNG", optimize=True)
        return stored.getvalue()

    def __exit__(self, *exc) -> None:
        self._browser.close()
        self._playwright.stop()


def add_images(nb: nbformat.NotebookNode, painter: Painter) -> int:
    """Put a fresh PNG beside every plotly figure of ``nb``; returns how many."""
    outputs = figure_outputs(nb)
    for out in outputs:
        out["data"][PNG] = base64.b64encode(painter.png(out["data"][PLOTLY])).decode("ascii")
    return len(outputs)


def main(paths: list[str]) -> None:
    with Painter() as painter:
        for path in map(Path, paths):
            nb = nbformat.read(path, as_version=4)
            count = add_images(nb, painter)
            if count:
                nbformat.write(nb, path)
            print(f"{path}: {count} figure(s) given a still image")


if __name__ == "__main__":
    main(sys.argv[1:])
