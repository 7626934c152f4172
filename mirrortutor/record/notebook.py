"""A program file, shown and run from a notebook: the course's TensorFlow on the page.

A chapter whose training lives in a file under ``programs/`` shows the file's source first
(:func:`show_program`), then runs it (:func:`run_program`) in the kernel, unchanged, with
mirrortutor's recording strategies in place of ``tf.distribute``'s (:mod:`.substitute`). The
program is plain TensorFlow: ``python programs/X.py`` runs it on a machine's GPUs as it is, and
``python -m mirrortutor run`` runs it on stock TensorFlow on a laptop's logical CPUs.

>>> mt.show_program("programs/custom_loop.py")            # doctest: +SKIP
>>> run = mt.run_program("programs/custom_loop.py")       # doctest: +SKIP
>>> run.trace.summary(); run.namespace["model"]           # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ProgramError
from .program import ProgramRun
from .program import run_program as _run
from .records import Recording

__all__ = ["run_program", "show_program"]


def _found(path: str | os.PathLike) -> Path:
    """``path`` as given, or under the course's folder (the notebooks run one level below it)."""
    path = Path(path)
    if not path.is_file() and not path.is_absolute() and (Path("..") / path).is_file():
        return Path("..") / path
    if not path.is_file():
        raise ProgramError(
            f"There is no program at {str(path)!r} (looked in {Path.cwd()} and the folder above). "
            "Give the path of a Python file, e.g. mt.run_program(\"programs/custom_loop.py\").")
    return path


def show_program(path: str | os.PathLike):
    """The program's source, highlighted, as the notebook's output (plain text where stored)."""
    from IPython.display import Code

    return Code(filename=str(_found(path)), language="python")


def run_program(path: str | os.PathLike, *args: str, recording: Recording | None = None,
                record: bool = True) -> ProgramRun:
    """Run the program at ``path`` with command-line ``args``, as ``python PATH ARGS…`` would, in
    this kernel. ``record=True`` (default): its strategies are mirrortutor's recording ones (each
    recording what ``recording`` asks); ``record=False``: stock TensorFlow. What the program
    prints appears below the cell. Returns the :class:`~.program.ProgramRun`: ``.trace``,
    ``.namespace`` (the program's variables: its ``model``, its losses, …).

    A program that raises raises here, with its own error (the traces so far are kept on the
    error as ``error.mirrortutor_run``); ``sys.exit(n)`` with ``n != 0`` is a ProgramError.
    """
    run = _run(_found(path), [str(a) for a in args], out=None, recording=recording,
               record=record)
    if run.error is not None:
        try:
            run.error.mirrortutor_run = run
        except AttributeError:
            pass
        raise run.error
    if run.exit_code:
        raise ProgramError(f"{run.script.name} exited with status {run.exit_code}: "
                           f"{run.error_text.strip() or 'it said nothing more'}.")
    return run
