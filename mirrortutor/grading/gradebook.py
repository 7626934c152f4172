"""The grades of one grading run: a row per student and question, as CSV and as readable text.

:mod:`mirrortutor.grading.grade` fills a :class:`Gradebook`; this module only stores and prints
it. Files written by :meth:`Gradebook.write`:

- ``grades.csv``: one row per student, one column per question (points), then total and maximum:
  ready for a spreadsheet or an LMS import;
- ``details.csv``: one row per student and question, with the reason for every lost point;
- ``summary.txt``: the same table and reasons, for reading;
- ``feedback/<student>.md``: one file per student, to hand back as it is: the total, and every
  question's verdict in the words ``mt.check`` uses (``q2.1 ✔ right: …`` / ``q2.1 ✘ not yet: …``).

Rows are sorted by student name and questions keep the key's order, so two runs over the same
submissions write identical files.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["NOT_SEALED", "Gradebook", "QuestionResult"]

NOT_SEALED = ("**This run was NOT sealed** (`--trust-submissions`): the submissions ran as the "
              "teacher, able to read the key and the other submissions and to change the grades.")


@dataclass(frozen=True)
class QuestionResult:
    """How one student did on one question."""

    student: str  # the submission's name: its file name without .ipynb (or its folder's name)
    question: str  # question id from the key, e.g. "q3.2"
    points: float  # max_points if every check cell of the question passed, else 0
    max_points: float  # what the question is worth (the key's check-cell metadata)
    reason: str  # "" when full marks; otherwise what went wrong, in plain words
    verdict: str = ""  # the whole line, as mt.check prints it: "q3.2 ✔ right: …" or "… ✘ not yet: …"

    @property
    def passed(self) -> bool:
        """Full marks for this question."""
        return self.points == self.max_points


@dataclass
class Gradebook:
    """Every student's result on every question of one key."""

    key: str  # the instructor notebook graded against (its file name)
    questions: list[tuple[str, float]]  # (question id, max points), in the key's order
    results: list[QuestionResult] = field(default_factory=list)  # one per student × question
    sealed: bool = True  # every submission ran sealed off (False: --trust-submissions, no sandbox)

    @property
    def students(self) -> list[str]:
        """Student names, sorted."""
        return sorted({r.student for r in self.results})

    def result(self, student: str, question: str) -> QuestionResult:
        """One student's result on one question (KeyError if absent)."""
        for r in self.results:
            if r.student == student and r.question == question:
                return r
        raise KeyError(f"no result for student {student!r}, question {question!r}")

    def total(self, student: str) -> float:
        """A student's points over all questions."""
        return sum(r.points for r in self.results if r.student == student)

    @property
    def max_total(self) -> float:
        """The most points a submission can get."""
        return sum(p for _, p in self.questions)

    def lost(self, student: str) -> dict[str, str]:
        """``{question: reason}`` for every question the student did not get full marks on."""
        return {r.question: r.reason for r in self._rows(student) if not r.passed}

    def _rows(self, student: str) -> list[QuestionResult]:
        order = {q: i for i, (q, _) in enumerate(self.questions)}
        return sorted((r for r in self.results if r.student == student), key=lambda r: order[r.question])

    def grades_csv(self) -> str:
        """One row per student: points per question, total, maximum."""
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(["student", *[q for q, _ in self.questions], "total", "max"])
        for s in self.students:
            out.writerow([s, *[_num(r.points) for r in self._rows(s)], _num(self.total(s)),
                          _num(self.max_total)])
        return buf.getvalue()

    def details_csv(self) -> str:
        """One row per student and question, with the reason for lost points."""
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(["student", "question", "points", "max_points", "reason"])
        for s in self.students:
            for r in self._rows(s):
                out.writerow([s, r.question, _num(r.points), _num(r.max_points), r.reason])
        return buf.getvalue()

    def summary(self) -> str:
        """The table and every reason, as plain text."""
        names = self.students
        width = max([len("student"), *map(len, names)])
        cols = [q for q, _ in self.questions]
        lines = [f"Graded against {self.key}: {len(names)} submission(s), {len(cols)} question(s), "
                 f"{_num(self.max_total)} point(s).", "",
                 "  ".join([f"{'student':{width}s}", *[f"{q:>5s}" for q in cols], "  total"])]
        for s in names:
            cells = [f"{_num(r.points):>5s}" for r in self._rows(s)]
            lines.append("  ".join([f"{s:{width}s}", *cells, f"{_num(self.total(s)):>3s}/"
                                    f"{_num(self.max_total)}"]))
        if not self.sealed:
            lines += ["", NOT_SEALED]
        lost = [(s, q, why) for s in names for q, why in self.lost(s).items()]
        if lost:
            lines += ["", "Points lost, and why:"]
            lines += [f"- {s}, {q}: {why}" for s, q, why in lost]
        return "\n".join(lines) + "\n"

    def feedback(self, student: str) -> str:
        """One student's feedback as Markdown: total, then each question's verdict and points."""
        lines = [f"# Feedback: {student}", "",
                 f"Exercise `{self.key}`: **{_num(self.total(student))} of {_num(self.max_total)} "
                 "points.**", "",
                 "Each question below shows what `mt.check` says about the answer you handed in, "
                 "as the grader judged it when it ran your notebook from the top.", "",
                 *([NOT_SEALED, ""] if not self.sealed else [])]
        for r in self._rows(student):
            question, _, said = (r.verdict or f"{r.question} : {r.reason}").partition(" ")
            lines += [f"## {question}: {_num(r.points)} of {_num(r.max_points)}", "", said.strip(), ""]
        return "\n".join(lines)

    def write(self, folder: str | Path) -> list[Path]:
        """Write grades.csv, details.csv, summary.txt and feedback/<student>.md into ``folder``;
        return their paths (the feedback files last, by student)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        files = {"grades.csv": self.grades_csv(), "details.csv": self.details_csv(),
                 "summary.txt": self.summary()}
        files.update({f"feedback/{s}.md": self.feedback(s) for s in self.students})
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        return [folder / name for name in files]


def _num(x: float) -> str:
    """Points as a spreadsheet shows them: 1, not 1.0; 0.5 stays 0.5."""
    return f"{x:g}"
