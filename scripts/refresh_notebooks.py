"""Run notebooks top to bottom and store their outputs as nbval's reference.

Usage: python scripts/refresh_notebooks.py notebooks/*.ipynb   (what `make notebooks` runs)

The kernel runs with ``capture_fd_output=False``, as under pytest, so TensorFlow's C++ log lines
on stderr stay out of the stored outputs exactly as they stay out of nbval's. Timing
metadata and widget state are dropped, so a re-run only shows changes that matter. Every plotly
figure then gets a still PNG beside it (scripts/static_figures.py), for GitHub and nbviewer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from static_figures import Painter, add_images


def clean(nb: nbformat.NotebookNode) -> None:
    nb.metadata.pop("widgets", None)  # widget state: large, and nbval never compares it
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timestamps; execution counts stay (nbval needs them)


def refresh(path: Path, painter: Painter) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=900,
        kernel_name="mirrortutor",  # the course's kernel, as under `make test` (nbval)
        resources={"metadata": {"path": str(path.parent)}},
        extra_arguments=["--IPKernelApp.capture_fd_output=False"],
    )
    client.execute()
    clean(nb)
    add_images(nb, painter)
    nbformat.write(nb, path)
    print(f"refreshed {path}")


if __name__ == "__main__":
    with Painter() as painter:
        for arg in sys.argv[1:]:
            refresh(Path(arg), painter)
