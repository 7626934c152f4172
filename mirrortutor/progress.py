"""Progress on every wait: one bar for each call that can take more than a couple of seconds.

Starting a cluster, a multi-worker program, a grading batch: each
shows a ``tqdm`` bar (``tqdm.auto``: a widget in JupyterLab, text in a terminal) that says what it
is waiting for and disappears when the work is done (``leave=False``). nbval never compares a bar:
the sanitiser (``grading/nbval_sanitize.cfg``) replaces its text, which holds timings.

Each bar that closes is also noted in :data:`FINISHED` (what, how far it got, out of how much), so
tests can check that a call's progress reached its end without reading a screen.
"""

from __future__ import annotations

import collections
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from .panel import show

__all__ = ["FINISHED", "Finished", "progress", "static_text"]


@dataclass(frozen=True)
class Finished:
    """A bar that closed: what it counted, and how far it got."""

    description: str  # what the bar said it was waiting for
    done: float  # how far it got
    total: float | None  # out of how much (None: not known in advance)


#: The most recent bars that closed, newest last (bounded: a long session never fills memory).
FINISHED: "collections.deque[Finished]" = collections.deque(maxlen=100)


def static_text(description: str) -> str:
    """What a stored notebook shows where a bar was: what it counted, and that it is live only."""
    return f"{description}: progress bar, shown live while the cell runs"


@contextmanager
def progress(total: float | None, description: str, unit: str = "step", *,
             disable: bool = False) -> Iterator:
    """A bar for ``total`` units of work, closed (and gone) when the block ends.

    Use ``bar.update(n)`` as work is done, and ``bar.set_postfix(...)`` for live figures (the
    staleness of the last update, say)::

        with progress(len(tasks), "starting the cluster", unit="task") as bar:
            for task in tasks:
                start(task)
                bar.update(1)
    """
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    in_notebook = issubclass(tqdm, tqdm_notebook)  # tqdm.auto chose the widget bar
    bar = tqdm(total=total, desc=description, unit=unit, leave=False, mininterval=0.2,
               disable=disable, **({"display": False} if in_notebook else {}))
    if in_notebook and not disable:
        show(bar.container, static_text(description))
    try:
        yield bar
    finally:
        if not disable:
            FINISHED.append(Finished(description, bar.n, total))
        bar.close()
