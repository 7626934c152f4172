"""The two things the course's site adds to Sphinx (website/conf.py uses them)."""

from __future__ import annotations


def jupyterlab_slug(heading: str) -> str:
    """A heading's anchor as JupyterLab makes it (spaces become dashes), so the chapters' own
    links between sections (``[...](#The-ring,-step-by-step)``) work on the site too."""
    return heading.strip().replace(" ", "-")


def plotly_where_drawn(app, pagename, templatename, context, doctree) -> None:
    """Load plotly.js (the plotly package's own, copied into _static by build_site.py) in the
    head of the pages that draw a figure, so it is there before any figure's script runs."""
    from docutils import nodes

    if doctree is not None and any("Plotly.newPlot" in node.astext()
                                   for node in doctree.findall(nodes.raw)):
        app.add_js_file("plotly.min.js")
