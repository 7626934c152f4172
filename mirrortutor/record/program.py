"""Run a whole program, unchanged, with its strategies recorded: what ``python -m mirrortutor
record`` does before it reports.

:func:`run_program` runs a script as ``python SCRIPT.py ARGS…`` would (``__main__``, its own
``sys.argv``, its folder first on ``sys.path``) inside :func:`~.substitute.substituted`, then writes
every strategy's trace to a file, whatever way the program ended: a program that raises still
leaves the trace of what it did before. What the program prints is its own; mirrortutor says
nothing on standard output.
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
import traceback
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ProgramError
from .records import Recording
from .substitute import substituted

__all__ = ["ProgramRun", "check_program", "run_program", "trace_name"]


@dataclass
class ProgramRun:
    """How a recorded program ended, and what it left."""

    script: Path  # the program that ran
    strategies: list = field(default_factory=list)  # every recording strategy it created, in order
    files: list[Path] = field(default_factory=list)  # the trace file of each, in the same order
    exit_code: int = 0  # what `python SCRIPT.py` would have exited with
    error: BaseException | None = None  # what the program raised (None: it ended normally)
    error_text: str = ""  # the program's own traceback, as Python would have printed it
    namespace: dict = field(default_factory=dict)  # the program's globals when it ended

    @property
    def trace(self):
        """The trace of the first strategy the program created (most programs make one)."""
        if not self.strategies:
            raise ProgramError(
                f"{self.script.name} created no tf.distribute strategy, so nothing was recorded. "
                "Record a program that trains under MirroredStrategy, MultiWorkerMirroredStrategy "
                "or ParameterServerStrategy.")
        return self.strategies[0].trace

    @property
    def traces(self) -> list:
        """The trace of every strategy the program created, in order."""
        return [s.trace for s in self.strategies]


def check_program(script: str | os.PathLike, out: str | os.PathLike) -> tuple[Path, Path]:
    """The script and the trace folder, checked before anything runs (plain errors otherwise)."""
    script = Path(script)
    if not script.is_file():
        raise ProgramError(
            f"There is no program at {str(script)!r} (looked in {Path.cwd()}). Give the path of a "
            "Python file: python -m mirrortutor record train.py [its arguments].")
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as exc:
        raise ProgramError(
            f"Cannot write trace files to {str(out)!r} ({exc.strerror or exc}). Choose a folder "
            "you can write to with --out DIR, or make this one writable.") from None
    return script, out


def trace_name(strategy, index: int) -> str:
    """``trace-0.npz``; a multi-worker strategy's ``trace-worker1-0.npz`` (its task id)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task = getattr(resolver, "task_id", None) if resolver is not None else None
    kind = getattr(resolver, "task_type", None)
    return f"trace-{kind}{task}-{index}.npz" if task is not None and kind else f"trace-{index}.npz"


def _program_traceback(exc: BaseException, script: Path) -> str:
    """The traceback Python would print for ``exc``, from the program's first frame on (the
    frames of this runner and of runpy above it are ours, not the program's)."""
    tb = exc.__traceback__
    target = os.path.realpath(script)
    while tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) != target:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def _program_globals(exc: BaseException, script: Path) -> dict:
    """The program's globals as they were when ``exc`` left it (from its module frame)."""
    tb, target = exc.__traceback__, os.path.realpath(script)
    while tb is not None:
        code = tb.tb_frame.f_code
        if os.path.realpath(code.co_filename) == target and code.co_name == "<module>":
            return tb.tb_frame.f_globals
        tb = tb.tb_next
    return {}


def run_program(script: str | os.PathLike, args: list[str] = (), *,
                out: str | os.PathLike | None, recording: Recording | None = None,
                created: list | None = None, record: bool | None = None) -> ProgramRun:
    """Run ``script`` with ``args``; with ``out``, under recording, each strategy's trace saved
    there (``created`` collects the strategies as they are made); without, stock TensorFlow.
    ``record=True`` without ``out`` records and keeps the traces in memory only."""
    script = Path(script)
    record = out is not None if record is None else record
    if out is not None:
        script, out = check_program(script, out)
    elif not script.is_file():
        check_program(script, ".")  # the same plain error for a missing script
    run = ProgramRun(script, strategies=created if created is not None else [])
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    recorded = substituted(recording, run.strategies) if record else nullcontext()
    try:
        with recorded:
            # As `python SCRIPT.py` does: an absolute __file__ (Python ≥ 3.9), argv as given.
            run.namespace = runpy.run_path(str(script.resolve()), run_name="__main__")
    except SystemExit as exc:  # sys.exit(n) in the program: its exit status, as Python gives it
        code = exc.code
        run.exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            run.error_text = f"{code}\n"
    except BaseException as exc:  # the program's own failure (KeyboardInterrupt too): kept
        run.error, run.exit_code = exc, 1
        run.error_text = _program_traceback(exc, script)
        run.namespace = _program_globals(exc, script)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    for i, strategy in enumerate(run.strategies if out is not None else ()):
        path = out / trace_name(strategy, i)
        strategy.trace.save(path)
        run.files.append(path)
    return run
