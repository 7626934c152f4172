"""The pytest plugin the grader loads: one JSON line per notebook cell, written as soon as it ran.

:mod:`mirrortutor.grading.grade` runs each submission as
``python -m pytest graded.ipynb --nbval -p mirrortutor.grading.nbval_log ...`` with the
environment variable ``MIRRORTUTOR_GRADE_LOG`` naming a file. For every cell nbval runs, this
plugin appends one line to that file::

    {"cell": 3, "outcome": "failed", "message": "...", "error": "NameError: ...", "text": "...",
     "answers": ["{\\"question\\": \\"q1.1\\", \\"data\\": 3.5}"]}

- ``cell``: nbval's number of the code cell (0 for the first code cell);
- ``outcome``: pytest's ``"passed"``, ``"failed"`` or ``"skipped"``;
- ``message``: what nbval said (a mismatch, a timeout, a dead kernel), cut to 500 characters;
- ``error``: the first error the cell raised, as ``Name: value``, or ``""``;
- ``text``: what the cell printed (streams and plain-text results);
- ``answers``: the lines the kernel's checks appended to the answers file
  (``MIRRORTUTOR_ANSWERS``, see :mod:`mirrortutor.grading.answers`) while this cell ran. After
  each cell the plugin reads what was appended since the last cell, so a record belongs to the
  cell that wrote it; the grader judges the check cells' records itself. (The file stays where it
  is: a sealed kernel writes it through a bind mount of that very file.)

A line is written as each cell ends, not at the end of the run, so a run the grader has to kill
(an endless loop the kernel would not interrupt) still leaves the results of every cell before it.
Every cell's call phase is logged, and a set-up or tear-down only when it failed (a kernel that
would not start, say). The log's name is taken out of the environment when the plugin loads, so
the notebook's kernel, started later, does not inherit it.

The plugin imports only the standard library and pytest: it runs in the grading process, which
must stay light (importing ``mirrortutor`` itself loads nothing heavy).
"""

from __future__ import annotations

import json
import os
from typing import Any, Generator

import pytest

__all__ = ["ANSWERS_LIMIT", "LOG_VARIABLE", "cell_text", "pytest_configure",
           "pytest_runtest_makereport", "take_answers"]

LOG_VARIABLE = "MIRRORTUTOR_GRADE_LOG"  # the environment variable naming the log file
ANSWERS_LIMIT = 4_000_000  # characters of answers read per cell; the rest is dropped
_log: dict[str, str] = {}  # {"path": the log file}, read once and hidden from the kernel
_read: dict[str, int] = {}  # answers file -> bytes already read


def pytest_configure(config: pytest.Config) -> None:
    """Remember the log's path and remove it from the environment the kernel will inherit."""
    if LOG_VARIABLE in os.environ:
        _log["path"] = os.environ.pop(LOG_VARIABLE)


def cell_text(outputs: list[dict[str, Any]] | None) -> str:
    """What a cell printed: its stream text and the plain-text form of its results, errors left out."""
    parts = []
    for o in outputs or []:
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") != "error":
            parts.append(o.get("data", {}).get("text/plain", "") + "\n")
    return "".join(parts)


def take_answers(path: str | None) -> list[str]:
    """The lines appended to the answers file since the last call (at most
    :data:`ANSWERS_LIMIT` characters a cell; a file the kernel cut shorter is read from its start)."""
    if not path or not os.path.exists(path):
        return []
    try:
        with open(path, "rb") as f:
            start = _read.get(path, 0)
            start = start if start <= os.fstat(f.fileno()).st_size else 0
            f.seek(start)
            text = f.read(ANSWERS_LIMIT)
            _read[path] = f.seek(0, os.SEEK_END)  # the rest of an over-long cell is dropped
    except OSError:
        return []
    return [line for line in text.decode("utf-8", "replace").splitlines() if line.strip()]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, None]:
    """After nbval's report on a cell is made, append that cell's record to the log."""
    report = (yield).get_result()
    if call.when != "call" and not report.failed:
        return
    outputs = getattr(item, "test_outputs", None) or []  # nbval keeps the cell's outputs here
    errors = [o for o in outputs if o.get("output_type") == "error"]
    record = {"cell": getattr(item, "cell_num", None), "outcome": report.outcome,
              "message": str(call.excinfo.value)[:500] if call.excinfo else "",
              "error": f"{errors[0].get('ename')}: {errors[0].get('evalue')}" if errors else "",
              "text": cell_text(outputs),
              "answers": take_answers(os.environ.get("MIRRORTUTOR_ANSWERS"))}
    path = _log.get("path") or os.environ.get(LOG_VARIABLE)
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
