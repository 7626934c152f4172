"""Marking: from one graded run's cell log to a result per question, judged in this process.

:mod:`mirrortutor.grading.grade` runs a submission under nbval and reads back the cell log that
:mod:`mirrortutor.grading.nbval_log` wrote. This module turns that log into
:class:`~mirrortutor.grading.gradebook.QuestionResult` rows:

- a check cell that ran to its end is marked by **judging the answer data** its check handed over
  (``record["answers"]``), with the question's own judge, here in the grader's process
  (:func:`mirrortutor.grading.checks.verdict`). What the kernel printed is not read for the mark;
  a printed ✔ with data that is wrong is reported as such;
- a check cell that raised, timed out or lost its kernel gets the reason from nbval's log, with
  the student cell that most likely caused it;
- a question with several check cells needs every one of them right.
"""

from __future__ import annotations

import json
from typing import Any

from .checks import NOT_YET, QUESTIONS, RIGHT, verdict
from .gradebook import QuestionResult
from .release import Assembly

__all__ = ["Record", "mark"]

# nbval's words for a cell that ran but printed something else than the key: not a cause of failure.
MISMATCH = ("Cell outputs differ", "Unrun reference cell has outputs")

# One line of the cell log: {"cell", "outcome", "message", "error", "text", "answers"}.
Record = dict[str, Any]


def mark(name: str, assembly: Assembly, records: dict[int, Record], questions: list[tuple[str, float]],
         hidden: dict[str, list], *, cell_timeout: float, timeout: float, stopped: bool
         ) -> list[QuestionResult]:
    """One student's result per question, from the log ``records`` of the run of ``assembly``."""
    verdicts: dict[str, list[tuple[bool, str]]] = {}
    for cell, question in assembly.check_code_cells.items():
        verdicts.setdefault(question, []).append(
            _judged(question, records.get(cell), records, assembly, cell, hidden.get(question, []),
                    cell_timeout=cell_timeout, timeout=timeout, stopped=stopped))
    unmatched = "" if assembly.matched else (" (none of the key's cells were found in this "
                                             "notebook: is it a submission for another exercise?)")
    rows = []
    for q, points in questions:
        found = verdicts.get(q) or [(False, f"{q} {NOT_YET}: the check cell was not run.")]
        wrong = [line for ok, line in found if not ok]
        line = wrong[0] + unmatched if wrong else found[0][1]
        reason = line.split(": ", 1)[1] if wrong else ""
        rows.append(QuestionResult(name, q, 0 if wrong else points, points, reason, line))
    return rows


def _judged(question: str, rec: Record | None, records: dict[int, Record], assembly: Assembly,
            cell: int, hidden: list, *, cell_timeout: float, timeout: float, stopped: bool
            ) -> tuple[bool, str]:
    """``(right, the verdict line)`` for one check cell."""
    fail = f"{question} {NOT_YET}: "
    if rec is None:
        if stopped:
            return False, fail + (f"not graded: the notebook was stopped after {timeout:g} s in "
                                  "total, before this check ran (an endless loop that could not "
                                  "be interrupted?).")
        return False, fail + ("the check did not run: the grading run ended before it (see "
                              "pytest.log with --keep).")
    message = rec["message"]
    if message.startswith("Timeout of") and "waiting for output" not in message:
        return False, fail + (f"the check did not finish within {cell_timeout:g} s and was "
                              "stopped (an endless loop in the code it calls?).")
    dead = "Kernel dead" in message or "Kernel died" in message  # mid-run, or at its start
    if dead or "waiting for output" in message or rec["error"]:
        what = (f"the check raised {rec['error']}" if rec["error"] and not dead
                else "the kernel running the notebook had died before this check")
        return False, fail + what + _context(records, assembly, cell, cell_timeout) + "."
    answers = [data for q, data in _answers(rec) if q == question]
    if not answers:
        return False, fail + ("the check handed the grader no answer: mt.check was redefined, "
                              "patched or never called in this cell, so nothing could be judged.")
    results = [verdict(QUESTIONS[question], data, hidden) for data in answers]
    ok, line = next((r for r in results if not r[0]), results[0])
    if not ok and f"{question} {RIGHT}" in rec.get("text", ""):
        line += (" (The notebook printed a ✔ right verdict here, but the answer it handed to the "
                 "grader is not right: the check's output was tampered with.)")
    return ok, line


def _answers(rec: Record) -> list[tuple[str, Any]]:
    """``(question, data)`` of each well-formed answer line of a cell's record."""
    found = []
    for line in rec.get("answers", []):
        try:
            item = json.loads(line)
        except (TypeError, ValueError):
            continue
        if isinstance(item, dict) and isinstance(item.get("question"), str) and "data" in item:
            found.append((item["question"], item["data"]))
    return found


def _context(records: dict[int, Record], assembly: Assembly, cell: int, cell_timeout: float) -> str:
    """The last student cell before ``cell`` that raised, timed out or lost the kernel: usually
    why the check could not work. (A cell whose output merely differs from the key's is not it.)"""
    for n in sorted((n for n in assembly.student_code_cells if n < cell), reverse=True):
        rec = records.get(n)
        if not rec or rec["outcome"] == "passed" or rec["message"].startswith(MISMATCH):
            continue
        where = f"; before it, the cell `{assembly.student_code_cells[n]}`"
        message = rec["message"]
        if "Failed to interrupt" in message or "waiting for output" in message:
            return f"{where} stopped the kernel (it died, or ignored the interrupt)"
        if message.startswith("Timeout of"):
            return f"{where} did not finish within {cell_timeout:g} s and was stopped"
        if rec["error"]:
            return f"{where} raised {rec['error']}"
        return f"{where} stopped the kernel"
    return ""
