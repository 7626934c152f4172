"""Sphinx configuration of the course website (built by website/build_site.py; `make site`).

Sphinx with MyST-NB reads the notebooks as they are stored: ``nb_execution_mode = "off"``, so
nothing re-runs and the pages show exactly the outputs nbval compares. website/build_site.py has
already turned every plotly figure into a ``<div>`` drawn by the plotly.js in ``_static`` (no
CDN) and every widget into its readable stored text.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # mtsite.py, beside this file

project = "mirrortutor"
author = "the mirrortutor authors"
copyright = "the mirrortutor authors, Apache-2.0"

extensions = ["myst_nb"]
nb_execution_mode = "off"  # stored outputs only: the site never runs a notebook
nb_merge_streams = True  # a cell's consecutive prints read as one block, as in JupyterLab
myst_heading_anchors = 3
myst_heading_slug_func = "mtsite.jupyterlab_slug"  # website/mtsite.py

html_theme = "sphinx_book_theme"
html_title = "mirrortutor: see what tf.distribute really does"
html_static_path = ["_static"]
html_css_files = ["mirrortutor.css"]
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,  # the notebooks live in the repository, with their outputs
    "use_fullscreen_button": False,
}
html_show_sourcelink = False
html_copy_source = False  # the notebooks are in the repository; the site needs only its pages
html_last_updated_fmt = None
exclude_patterns = ["_build"]
suppress_warnings = ["myst.header", "misc.highlighting_failure"]
# The theme's colour mode when a reader has chosen none (without it, the theme's script logs an
# error on a first visit from disk: "Got invalid theme mode").
html_context = {"default_mode": "auto"}


def setup(app) -> None:
    from mtsite import plotly_where_drawn

    app.connect("html-page-context", plotly_where_drawn)
