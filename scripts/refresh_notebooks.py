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
from nbconvert.preprocessors import CoalesceStreamsPreprocessor

from static_figures import Painter, add_images


#: The checkout the notebooks run from: its path is this machine's, not the reader's.
ROOT = Path(__file__).resolve().parents[1]


def without_checkout(text: str, root: Path = ROOT) -> str:
    """``/home/me/mirrortutor/mirrortutor/errors.py`` -> ``mirrortutor/errors.py``: a stored
    traceback names files as a reader's clone has them, wherever the notebook was run."""
    return text.replace(f"{root}/", "")


def clean(nb: nbformat.NotebookNode) -> None:
    nb.metadata.pop("widgets", None)  # widget state: large, and nbval never compares it
    # A print flushed in two pieces is stored as two stream outputs, and GitHub shows the second
    # (often a lone newline) as an empty output. nbval merges them before comparing, so merging
    # them here changes nothing it checks.
    CoalesceStreamsPreprocessor().preprocess(nb, {})
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timestamps; execution counts stay (nbval needs them)
        for output in cell.get("outputs", []):
            # nbval never compares a traceback; stream text it compares after its sanitiser,
            # which hides a warning's file path the same way on both sides.
            if output.output_type == "error":
                output.traceback = [without_checkout(line) for line in output.traceback]
            elif output.output_type == "stream":
                output.text = without_checkout(output.text)


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
