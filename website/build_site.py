"""Build the course website from the notebooks' stored outputs, re-running nothing.

Usage: python website/build_site.py [OUT]   (`make site`; OUT defaults to build/site)

It stages a Sphinx source folder in OUT/source and builds OUT/html, a static site that works from
disk, offline (every script and style is in OUT/html/_static):

- ``index``: the README's opening paragraph and its course table, each notebook name a link;
- ``notebooks/``: the chapters in course order, as stored;
- ``exercises/``: the *student* version of each exercise, made by the grader's own
  :func:`mirrortutor.grading.release.release` (no solutions, no hidden inputs, no outputs).

Two kinds of stored output have no renderer outside JupyterLab, so the staged copies change them:
a plotly figure (``application/vnd.plotly.v1+json``) becomes the ``<div>`` and ``Plotly.newPlot``
call that :func:`plotly.io.to_html` writes, drawn by the plotly.js shipped in the plotly package;
a widget (``application/vnd.jupyter.widget-view+json``, a view of a model that only a kernel
holds) becomes its stored text (mirrortutor.panel writes one for every widget the course shows),
in a note. The still PNG beside a figure (scripts/static_figures.py) is dropped: the page has
the live figure.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


def figure_html(figure: dict, div_id: str) -> str:
    """A stored plotly figure as a page's HTML: plotly's own div and script, no plotly.js."""
    import plotly.io as pio

    drawn = pio.to_html(figure, include_plotlyjs=False, full_html=False, div_id=div_id,
                        validate=False, config={"responsive": True})
    return f'<div class="mt-figure">{drawn}</div>'


def widget_html(text: str) -> str:
    """A widget's stored text, as a note that says it is live in a running notebook."""
    return f'<div class="mt-widget-note">{html.escape(text)}</div>'


def for_the_page(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """``nb`` with every figure and widget output in a form a static page shows."""
    nb.metadata.pop("widgets", None)
    figures = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if PLOTLY in data:
                figures += 1
                out["data"] = {"text/html": figure_html(data[PLOTLY], f"{name}-figure-{figures}")}
            elif WIDGET in data:
                out["data"] = {"text/html": widget_html("".join(data.get("text/plain", "")))}
    return nb


def front_page(readme: str, exercises: set[str]) -> str:
    """index.md: the README's first paragraph and course table, notebook names as links."""
    intro = readme.split("\n\n")[1]
    table = readme.split("## The course", 1)[1].split("\n\n")[1]
    rows = []
    for line in table.splitlines():
        name = re.match(r"\| `(\d\db?_\w+)` \|", line)  # 10b_…: a chapter's second part
        if name:
            stem = name.group(1)
            task = f"[exercise](exercises/{stem}.ipynb)" if stem in exercises else ""
            line = line.replace(f"`{stem}`", f"[{stem}](notebooks/{stem}.ipynb)") + f" {task} |"
        elif line.startswith("| notebook"):
            line += " exercise |"
        else:
            line += "---|"
        rows.append(line)
    return "\n".join([
        "# mirrortutor", "", intro, "",
        "This site shows the course as stored in its repository: every output was made by running "
        "the notebooks, and nothing here runs. To run them, and to use the live panels, see the "
        "README (`make lab`).", "", "## The course", "", *rows, "",
        "```{toctree}", ":hidden:", ":glob:", ":caption: Chapters", "", "notebooks/*", "```", "",
        "```{toctree}", ":hidden:", ":glob:", ":caption: Exercises (student versions)", "",
        "exercises/*", "```", ""])


def stage(source: Path) -> None:
    """Write the Sphinx source folder: config, static files, index and staged notebooks."""
    import plotly

    from mirrortutor.grading.release import release

    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(HERE / "_static", source / "_static")
    for name in ("conf.py", "mtsite.py"):
        shutil.copy(HERE / name, source / name)
    shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js",
                source / "_static" / "plotly.min.js")
    for folder, make in (("notebooks", lambda nb: nb), ("exercises", release)):
        (source / folder).mkdir()
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            page = for_the_page(make(nbformat.read(path, as_version=4)), path.stem)
            nbformat.write(page, source / folder / path.name)
    exercises = {p.stem for p in (ROOT / "exercises").glob("*.ipynb")}
    (source / "index.md").write_text(front_page((ROOT / "README.md").read_text(), exercises))


def build(out: Path) -> Path:
    """Stage and build the site; returns the folder holding index.html."""
    stage(out / "source")
    html_dir = out / "html"
    subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "auto",
                    "-d", str(out / "doctrees"), str(out / "source"), str(html_dir)], check=True)
    return html_dir


if __name__ == "__main__":
    target = build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "site")
    print(f"site built: {target / 'index.html'}")
