"""The grading engine: run every submission against the instructor's key with nbval, and score it.

:func:`grade` is the whole of it; :func:`find_submissions` names the students, and the command
line (:mod:`mirrortutor.grading.__main__`) only parses arguments and calls it::

    python -m mirrortutor.grading grade SUBMISSIONS/ --key exercises/03_gradients_allreduce.ipynb

Grading one submission (all of them, one after another, or ``--jobs`` at a time):

1. :func:`mirrortutor.grading.release.assemble` puts the key's check cells back in place of
   whatever the student left there, and clears the student's outputs (cells left exactly as the
   key has them get the key's outputs, so nbval compares them);
2. a check cell of a question with hidden inputs gets, on top, the line that hands them over
   (:func:`~mirrortutor.grading.answers.hidden_prefix`): the kernel receives them with that
   check's code, and never in a file or a variable;
3. ``pytest --nbval`` runs that notebook from a fresh temporary folder of the grader's, with a
   per-cell timeout and the sanitizer below, in a fresh **sealed** kernel
   (:mod:`mirrortutor.grading.sandbox`): its own namespaces, a scratch folder with the student's
   copy, the Python environment read-only, no network, limits; the key, the notebook nbval runs,
   the other submissions and the grades are not there. nbval compares each check cell's output
   with the key's stored output. The kernel hands in its answers through one file
   (:data:`~mirrortutor.grading.answers.ANSWERS_VARIABLE`);
4. the pytest plugin :mod:`mirrortutor.grading.nbval_log`, loaded with ``-p`` (no code is written
   into the folder, and no ``conftest.py`` is read), logs every cell's outcome, printed text and
   the answers its checks handed in, line by line, so even a run that has to be killed leaves its
   results. The log lives outside the notebook's folder and its name never reaches the kernel;
5. :func:`mirrortutor.grading.marking.mark` judges each check's answer data with the question's
   judge, in this process: full points when it is right, else 0 and the verdict, or the error the
   check raised and the student cell that caused it, a timeout, or a kernel that died. A broken
   submission never stops the grader; the others are still graded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from ..errors import ExerciseFormatError
from ..progress import progress
from . import sandbox
from .answers import ANSWERS_VARIABLE, hidden_prefix
from .checks import NOT_YET, load_questions
from .gradebook import Gradebook, QuestionResult
from .marking import Record, mark
from .nbval_log import LOG_VARIABLE
from .release import Assembly, assemble, check_cells, hidden_inputs

__all__ = ["PLUGIN", "SANITIZE", "SANITIZE_FILE", "find_submissions", "grade"]

# nbval's sanitizer: the same file `make test` uses, shipped in the package so that grading works
# outside the repository too.
SANITIZE_FILE = Path(__file__).with_name("nbval_sanitize.cfg")
SANITIZE = SANITIZE_FILE.read_text(encoding="utf-8")

# The pytest plugin that logs each cell (a module, so the grading process imports it with -p).
PLUGIN = "mirrortutor.grading.nbval_log"

# What every graded kernel runs with, sealed or not: fixed hashing, and TensorFlow's C++ logs off
# (a cluster's workers would print them into the cells' outputs).
RUN_ENV = {"PYTHONHASHSEED": "0", "TF_CPP_MIN_LOG_LEVEL": "3"}

# How each run's pytest starts: nbformat imports jsonschema, which imports the optional
# rfc3987_syntax and compiles its grammar (about 2 s, every run); nbformat's notebook schema uses
# none of the formats it checks, so the run goes without it. Half of a small submission's time.
BOOT = ("import sys; sys.modules.setdefault('rfc3987_syntax', None); import pytest; "
        "sys.exit(pytest.main(sys.argv[1:]))")


def find_submissions(folder: str | Path, exclude: Path | None = None) -> dict[str, Path]:
    """``{student: notebook}``: ``alice.ipynb`` is alice; a folder with one notebook is its name."""
    folder = Path(folder)
    if folder.is_file():
        return {folder.stem: folder}
    paths = [p for p in sorted(folder.rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts
             and (exclude is None or p.resolve() != exclude.resolve())]
    per_folder: dict[Path, int] = {}
    for p in paths:
        per_folder[p.parent] = per_folder.get(p.parent, 0) + 1
    found = {}
    for p in paths:
        rel = p.relative_to(folder)
        alone = p.parent != folder and per_folder[p.parent] == 1
        found[rel.parent.as_posix() if alone else rel.with_suffix("").as_posix()] = p
    return found


def grade(submissions: str | Path | dict[str, Path], key: str | Path, *, out: str | Path | None = None,
          cell_timeout: float = 60, timeout: float = 600, jobs: int = 1,
          keep: str | Path | None = None, trust_submissions: bool = False,
          limits: sandbox.Limits = sandbox.Limits()) -> Gradebook:
    """Grade every submission against ``key``; write the tables to ``out`` if given.

    ``cell_timeout``: seconds one cell may run before it is interrupted (nbval's own timeout).
    ``timeout``: seconds a whole submission may take before its kernel is killed.
    ``keep``: a folder to keep each graded notebook and pytest's log in, to see what happened.
    ``trust_submissions``: where no sandbox can be made, run the submissions unsealed, as this
    user, instead of stopping with :class:`~mirrortutor.errors.SandboxError` (the reports say so).
    ``limits``: what each sealed kernel may use (:class:`~mirrortutor.grading.sandbox.Limits`).
    """
    key = Path(key)
    key_nb = nbformat.read(key, as_version=4)
    checks = check_cells(key_nb)
    hidden = hidden_inputs(key_nb)
    known = load_questions()  # every judge imported now, before any submission's code runs
    unknown = sorted({c.question for c in checks} - set(known))
    if unknown:
        raise ExerciseFormatError(
            f"the key's check cells name {unknown}, which no mirrortutor question has, so they "
            "cannot be judged. Correct the check cells' metadata, or add the questions "
            "(exercises/README.md, 'Add a question').")
    folders = [key, *([Path(submissions)] if not isinstance(submissions, dict) else
                      map(Path, submissions.values())), *[Path(p) for p in (out, keep) if p]]
    sealed = limits if sandbox.require(trust_submissions, *folders) else None
    if not isinstance(submissions, dict):
        submissions = find_submissions(submissions, exclude=key)
    questions = list(dict.fromkeys((c.question, c.points) for c in checks))
    book = Gradebook(key.name, questions, sealed=sealed is not None)
    programs = key.resolve().parent.parent / "programs"  # the course's, as its notebooks see it

    def one(item: tuple[str, Path]) -> list[QuestionResult]:
        name, path = item
        return _grade_one(name, Path(path), key_nb, questions, hidden, cell_timeout, timeout,
                          Path(keep) / name if keep else None, sealed,
                          programs if programs.is_dir() else None)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, \
            progress(len(submissions), f"grading {key.name}", unit="submission") as bar:
        for rows in pool.map(one, sorted(submissions.items())):
            book.results += rows
            bar.update(1)
    if out is not None:
        book.write(out)
    return book


def _grade_one(name: str, path: Path, key_nb: nbformat.NotebookNode,
               questions: list[tuple[str, float]], hidden: dict[str, list], cell_timeout: float,
               timeout: float, keep: Path | None, sealed: sandbox.Limits | None,
               programs: Path | None = None) -> list[QuestionResult]:
    """One student's results, one per question: the submission assembled, run, and marked.
    ``programs``: the course's ``programs/`` folder, copied next to the submission (its cells
    run ``"programs/NN_name.py"`` as the course's notebooks do)."""
    def everyone(reason: str) -> list[QuestionResult]:
        return [QuestionResult(name, q, 0, p, reason, f"{q} {NOT_YET}: {reason}") for q, p in questions]

    try:
        submission = nbformat.read(path, as_version=4)
        assembly = assemble(submission, key_nb)
        _hand_over_hidden(assembly, hidden)
    except Exception as exc:  # a broken file is the student's problem, never the grader's crash
        return everyone(f"the submission could not be read as a notebook ({type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]}); nothing was run.")
    try:
        with tempfile.TemporaryDirectory(prefix="mt-grade-") as tmp, \
                tempfile.TemporaryDirectory(prefix="mt-grader-") as private:
            work = Path(keep) if keep else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            run = sandbox.seal(Path(private), path, sealed, RUN_ENV, programs) if sealed else None
            if programs and not sealed:
                shutil.copytree(programs, work / "programs", dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            records, stopped = _run_nbval(assembly.notebook, work, Path(private), run,
                                          cell_timeout, timeout, keep=keep is not None)
    except Exception as exc:  # the grader's own trouble (disk full, say): this one only
        return everyone(f"the grader could not run this submission ({type(exc).__name__}: {exc}).")
    return mark(name, assembly, records, questions, hidden, cell_timeout=cell_timeout,
                timeout=timeout, stopped=stopped)


def _hand_over_hidden(assembly: Assembly, hidden: dict[str, list]) -> None:
    """Put the hand-over of its hidden inputs on top of each check cell of a question that has
    some (the key's copy: the student never wrote it)."""
    code = [c for c in assembly.notebook.cells if c.cell_type == "code"]
    for n, question in assembly.check_code_cells.items():
        if hidden.get(question):
            code[n].source = hidden_prefix(question, hidden[question]) + code[n].source


def _kernel_option(run: sandbox.Run | None) -> list[str]:
    """The sealed kernel; unsealed, the course's kernel (a private network) if installed, else
    this Python's."""
    from ..clusters.kernel import KERNEL_NAME, installed

    if run is not None:
        return ["--nbval-kernel-name", run.kernel]
    return ["--nbval-kernel-name", KERNEL_NAME] if installed() else ["--nbval-current-env"]


def _run_nbval(notebook: nbformat.NotebookNode, work: Path, private: Path, run: sandbox.Run | None,
               cell_timeout: float, timeout: float, keep: bool = False
               ) -> tuple[dict[int, Record], bool]:
    """Run nbval on ``notebook`` in ``work``; return ``({code cell: record}, was it killed)``.

    The empty ``pytest.ini`` makes ``work`` pytest's root, so no configuration from the folders
    above (a repository's ``addopts``, say) changes the run; ``--noconftest`` keeps any
    ``conftest.py`` there (or left in a ``--keep`` folder) from loading. The cell log and the
    answers file live in ``private``, outside the notebook's folder; with ``keep`` the log is
    copied into ``work`` afterwards. ``run``: the sealed kernel prepared in ``private``, or None.
    """
    nbformat.write(notebook, work / "graded.ipynb")
    (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    log = private / "cells.jsonl"
    answers = run.answers if run else private / "answers.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({LOG_VARIABLE: str(log), ANSWERS_VARIABLE: str(answers), **(run.env if run else {})},
               **RUN_ENV)
    cmd = [sys.executable, "-c", BOOT, "graded.ipynb", "-c", "pytest.ini", "--rootdir", ".",
           "-p", "no:cacheprovider", "-p", PLUGIN, "--noconftest", "-q", "--nbval",
           *_kernel_option(run), "--nbval-sanitize-with", str(SANITIZE_FILE),
           f"--nbval-cell-timeout={cell_timeout:g}"]
    stopped = False
    with open(work / "pytest.log", "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stopped = True
            _kill_tree(proc)
    records: dict[int, Record] = {}
    if log.exists():
        if keep:
            shutil.copy(log, work / "cells.jsonl")
        for line in log.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            records.setdefault(rec["cell"], rec)  # the first failure (setup or call) says most
    return records, stopped


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill pytest and the kernel it started (the kernel runs in a session of its own)."""
    try:
        import psutil  # installed with ipykernel

        children = psutil.Process(proc.pid).children(recursive=True)
    except Exception:  # already gone, or no psutil: the kernel notices its parent died
        children = []
    for p in [*children]:
        try:
            p.kill()
        except Exception:
            pass
    proc.kill()
    proc.wait()
