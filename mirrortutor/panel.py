"""A live widget with a stored text that a reader can read.

A notebook output that shows an ipywidgets widget holds two things: the widget's view (a pointer
to a live model in the kernel) and a ``text/plain`` fallback. A running JupyterLab draws the view.
Everything else draws the fallback: GitHub, nbviewer, ``nbconvert``, a notebook opened without
its kernel, and the notebook as stored in git (``scripts/refresh_notebooks.py`` drops the
widgets' state). ipywidgets' own fallback is the widget's ``repr``
(``VBox(children=(HBox(children=(IntSlider(…``), and a tqdm bar's is its first frame
(``0%|          | 0/6``), frozen there forever. Neither tells a reader anything.

:class:`Panel` shows the same live view, with a fallback that says what the widget is and that
it needs a running notebook. The fallback is fixed text, so a re-run stores the same output
(nbval compares ``text/plain``; it never compares widget views).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Panel", "show"]


@dataclass(frozen=True)
class Panel:
    """An ipywidgets ``widget`` displayed with ``text`` as what static pages show instead."""

    widget: Any  # an ipywidgets.Widget (a VBox of controls, tqdm's bar container, …)
    text: str  # what a reader without a kernel sees in its place

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        # IPython's display protocol: the widget's own bundle, its text/plain replaced.
        bundle = dict(self.widget._repr_mimebundle_())
        bundle["text/plain"] = self.text
        return bundle


def show(widget: Any, text: str) -> None:
    """Display ``widget`` now (as the last line of a cell would), with ``text`` as its stored
    fallback."""
    from IPython.display import display

    display(Panel(widget, text))
