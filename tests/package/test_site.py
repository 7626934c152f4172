"""The course website (`make site`): every page, opened from disk in Chromium with no network.

website/build_site.py builds the site from the notebooks' stored outputs into a temporary folder
(no notebook runs). Then Debian's Chromium, driven by Playwright as in
tests/package/test_browser.py, opens every page through ``file://`` in an offline browser context, and the tests check what a
reader would see: each stored plotly figure drawn (an SVG with marks in it) by the plotly.js the
site carries, no console error, no widget repr and no frozen progress bar, and exercise pages that
are the student versions. Screenshots go to artifacts/site/ for a person to look at.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
from test_notebooks import FROZEN_BAR, WIDGET_REPR

from mirrortutor.grading.release import BEGIN, END, HIDDEN, STUDENT, release

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "website"))
from build_site import PLOTLY, WIDGET, build  # noqa: E402  (website/build_site.py)

sys.path.insert(0, str(ROOT / "scripts"))
from static_figures import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

ARTIFACTS = ROOT / "artifacts" / "site"
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KEYS = sorted((ROOT / "exercises").glob("*.ipynb"))

#: Pages photographed for a person to look at, and what each picture centres on.
SHOTS = {"index.html": "table",
         "notebooks/04_allreduce_algorithms.html": ".js-plotly-plot",
         "exercises/03_gradients_allreduce.html": ".cell:has-text('NotImplementedError')"}
#: Marks a drawn plotly figure holds: scatter lines and markers, bars, a heatmap's image, the
#: links and nodes of a Sankey diagram. An empty or failed plot has none of them.
DRAWN = ('g.trace path[d]:not([d=""]), g.hm image, g.sankey-link path, .sankey-node rect, '
         'g.sankey path')


def _outputs(path: Path, mimetype: str) -> int:
    nb = nbformat.read(path, as_version=4)
    return sum(mimetype in out.get("data", {}) for cell in nb.cells
               for out in cell.get("outputs", []))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module; the folder holding index.html."""
    return build(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def pages(site):
    """Every page of the site, loaded offline: {relative path: (figures, text, errors)}.

    ``figures`` lists, per plotly figure on the page, how many SVGs it drew and how many marks;
    ``errors`` is every console error and uncaught exception."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    found = {}
    paths = ["index.html"] + [f"{folder}/{p.stem}.html" for folder, group in
                              (("notebooks", CHAPTERS), ("exercises", KEYS)) for p in group]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
            for rel in paths:
                page, errors = context.new_page(), []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
                page.goto((site / rel).as_uri(), wait_until="load")
                figures = page.evaluate(
                    "drawn => Array.from(document.querySelectorAll('.js-plotly-plot')).map("
                    "el => [el.querySelectorAll('svg.main-svg').length,"
                    " el.querySelectorAll(drawn).length])", DRAWN)
                found[rel] = (figures, page.inner_text("main"), errors)
                if rel in SHOTS:
                    page.locator(SHOTS[rel]).first.evaluate(
                        "el => el.scrollIntoView({block: 'center'})")
                    page.screenshot(path=str(ARTIFACTS / rel.replace("/", "-").replace(
                        ".html", ".png")))
                page.close()
        finally:
            browser.close()
    return found


def test_the_site_has_every_chapter_and_exercise_in_course_order(site):
    """The front page is the README's course table, linking every chapter in order; the side
    navigation lists the chapters, then the exercises."""
    index = (site / "index.html").read_text()
    links = re.findall(r'href="notebooks/(\d\db?_\w+)\.html"', index)
    assert list(dict.fromkeys(links)) == [p.stem for p in CHAPTERS]
    for key in KEYS:
        assert f'href="exercises/{key.stem}.html"' in index
    assert "Chapters" in index and "Exercises (student versions)" in index


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_stored_figure_is_drawn_offline(pages, path):
    """Each stored plotly figure of the chapter is drawn on its page, from the site's own
    plotly.js, with the network off: an SVG with marks in it."""
    figures, _, errors = pages[f"notebooks/{path.stem}.html"]
    assert len(figures) == _outputs(path, PLOTLY), figures
    for svgs, marks in figures:
        assert svgs >= 1 and marks >= 1, figures
    assert not errors


@pytest.mark.parametrize("rel", ["index.html"] + [f"{f}/{p.stem}.html" for f, g in
                                                  (("notebooks", CHAPTERS), ("exercises", KEYS))
                                                  for p in g])
def test_pages_have_no_console_error_and_no_unreadable_output(pages, rel):
    """No page logs a console error or fails a request, and none shows a widget's repr or a
    progress bar frozen at its first frame."""
    _, text, errors = pages[rel]
    assert not errors
    bad = [line for line in text.splitlines()
           if FROZEN_BAR.search(line) or WIDGET_REPR.search(line)]
    assert not bad


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_widgets_show_their_stored_text(site, path):
    """Each stored widget output appears as its readable text (mirrortutor.panel's), in a note."""
    page = (site / "notebooks" / f"{path.stem}.html").read_text()
    assert page.count('class="mt-widget-note"') == _outputs(path, WIDGET)
    assert WIDGET not in page and "widget-state+json" not in page


def _solution_lines(key: nbformat.NotebookNode) -> list[str]:
    """Lines only the solution has: inside BEGIN/END blocks, not in the student version."""
    student = "\n".join(c.source for c in release(key).cells)
    lines = []
    for cell in key.cells:
        inside = False
        for line in cell.source.splitlines():
            marker = line.strip()
            if marker.startswith(BEGIN) or marker.startswith(END):
                inside = marker.startswith(BEGIN)
            elif inside and marker and not marker.startswith(STUDENT) and marker not in student:
                lines.append(marker)
    return lines


@pytest.mark.parametrize("path", KEYS, ids=lambda p: p.name)
def test_exercise_pages_are_student_versions(site, path):
    """An exercise page shows no solution marker, no solution line, no hidden input and no
    output, and shows the student's TODOs instead."""
    key = nbformat.read(path, as_version=4)
    page = (site / "exercises" / f"{path.stem}.html").read_text()
    import html as _html
    text = _html.unescape(re.sub(r"<[^>]+>", "", page))  # what a reader sees, code included
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    solution = _solution_lines(key)
    assert solution, "the key has solution lines to look for"
    assert not [line for line in solution if line in text]
    for cell in key.cells:
        for case in cell.get("metadata", {}).get("mirrortutor", {}).get(HIDDEN, []):
            assert json.dumps(case) not in text
    assert 'class="cell_output' not in page
    todos = "\n".join(c.source for c in release(key).cells).count("raise NotImplementedError")
    assert text.count("raise NotImplementedError") == todos
