"""Exercises and their grading: keys score full marks, each realistic mistake loses its question,
and no fake scores anything.

Grading spawns a kernel per submission, so every submission of this module is graded once, in
one pool of three (the ``batches`` fixture); the tests then read the resulting gradebooks. Per
exercise the batch holds the instructor's solution (this is the only run of each
key: cells left as the key has them are compared with its stored outputs, so the solution is
checked cell by cell), a realistic mistake or two (each the solution with one slip, so exactly
one question is lost), and three fakes that delete every code cell and forge instead (no
TensorFlow, cheap).
The failure modes (endless loop, dead kernel, missing import, hidden inputs, the total timeout)
use a small key without TensorFlow (:func:`submissions.small_key`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from mirrortutor.grading import grade, release
from mirrortutor.grading.gradebook import Gradebook

from exercise_keys import KEYS, ROOT, key, source
from submissions import FORGERIES, edit, faked, forged_records, small, small_key

FAST = 5  # seconds per cell in the small key's batch (the endless loop)

MISTAKES = {  # exercise -> [(student, question lost, words its reason must contain, the slip), ...]
    "01": [("assign_not_add", "q1.1", "assign_add adds it", lambda: edit("01", {"q1-1-answer": "prediction = 1.0"}))],
    "02": [("off_by_one", "q2.1", "ceil(58 / 4) = 15", lambda: edit("02", {"q2-1-answer": (
        "def split_sizes(global_batch_size, num_replicas):\n"
        "    per_replica = global_batch_size // num_replicas\n"
        "    return [per_replica] * (num_replicas - 1) + "
        "[global_batch_size - per_replica * (num_replicas - 1)]")}))],
    "03": [("mean_of_means", "q3.1", "averaged the replicas' means", lambda: edit("03", {"q3-1-answer": (
        "def global_gradient(per_replica_means, counts):\n"
        "    return sum(np.asarray(m) for m in per_replica_means) / len(per_replica_means)")}))],
    "04": [("adds_not_copies", "q4.1", "the ring gives", lambda: edit("04", {"q4-1-answer": source(
        "04", "q4-1-answer").replace("] = sent[r]", "] += sent[r]")}))],
    "05": [("most_gpus", "q5.1", "compare each estimate's speedup", lambda: edit("05", {"q5-1-answer": source(
        "05", "q5-1-answer").replace("key=lambda name: estimates[name].speedup",
                                     "key=lambda name: estimates[name].num_replicas")}))],
    "06": [("rounds_down", "q6.2", "rounds UP", lambda: edit("06", {"q6-2-answer": source(
        "06", "q6-2-answer").replace("math.ceil(size / min_shard_bytes)", "size // min_shard_bytes")}))],
    "07": [("counts_itself", "q7.1", "count only the others", lambda: edit("07", {"q7-1-answer": source(
        "07", "q7-1-answer").replace("(applies < applies[i])", "(applies <= applies[i])")})),
           ("one_at_a_time", "q7.4", "no two of your steps ran at the same time", lambda: edit("07", {
               "q7-4-answer": source("07", "q7-4-answer").replace(
                   "at_once = max_staleness + 1", "at_once = 1")}))],
    "08": [("rotated_back", "q8.1", "rotated the wrong way", lambda: edit("08", {"q8-1-answer": source(
        "08", "q8-1-answer").replace("worker_0[w * R:] + worker_0[:w * R]",
                                     "worker_0[-w * R:] + worker_0[:-w * R]")}))],
    "09": [("adds_read_and_compute", "q9.1", "You added reading and computing", lambda: edit("09", {
        "q9-1-answer": source("09", "q9-1-answer").replace(
            "max(compute_s, read_s / parallel_reads)", "compute_s + read_s / parallel_reads")}))],
    "10": [("unscaled_rate", "q10.1", "the linear scaling rule", lambda: edit("10", {"q10-1-answer": source(
        "10", "q10-1-answer").replace('"learning_rate": 2 * 0.2', '"learning_rate": 0.2')}))],
}

#: The course's chapters that practise something (every chapter but 00; a part 09b shares 09): "01", …
CHAPTERS = sorted({p.name[:2] for p in (ROOT / "notebooks").glob("*.ipynb") if p.name[:2] != "00"})


def write(folder: Path, subs: dict[str, nbformat.NotebookNode]) -> Path:
    folder.mkdir(parents=True)
    for name, nb in subs.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


def small_batch() -> dict[str, nbformat.NotebookNode]:
    """The small key's batch: honest, a lookup table, a loop, a missing import, a killed kernel,
    the untouched handout, a check cell edited or deleted, and records forged during the checks."""
    return {
        "honest": small(),
        "lookup_table": small({"q7-1-answer": (
            "def staleness(reads, applies):\n"
            "    table = {(0.0, 1.0, 2.0, 3.5, 4.5, 5.5): [0, 1, 2, 2, 2, 2],\n"
            "             (0.0, 0.0, 1.0, 2.0, 0.0, 3.0): [0, 1, 1, 1, 4, 2], (0.0,): [0]}\n"
            "    return table.get(tuple(reads), [0] * len(applies))")}),
        "endless_loop": small({"q7-1-answer": "while True:\n    pass"}),
        "missing_import": small({"q7-2-answer": "import horovod.tensorflow as hvd\npredicted_mean = 15 / 9"}),
        "kernel_killed": small({"q6-3-answer": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"}),
        "untouched_handout": release.release(small_key()),
        "edited_check": small({"q7-2-answer": "predicted_mean = 2.0"}, checks={
            "q7-2-check": 'print("q7.2 ✔ right: it is right")'}),
        "deleted_check": small({"q7-2-answer": "predicted_mean = 2.0"}, drop={"q7-2-check"}),
        "forged_records": forged_records(),
    }


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> dict[str, Gradebook]:
    """Every batch of this module, each submission graded once, in one pool of three: per
    exercise the solution, its mistakes and three fakes; the small key's batch, and that batch
    again (to compare). The slowest (08's, a real cluster) start first; the runs that mostly wait
    (a loop, a dead kernel) overlap the ones that compute. Then one gradebook per batch, written
    as the command line would."""
    root = tmp_path_factory.mktemp("batches")
    nbformat.write(small_key(), root / "small_key.ipynb")
    keys, folders, tasks = {}, {}, []
    for ex in sorted(KEYS, reverse=True):
        slips = {student: slip() for student, _, _, slip in MISTAKES[ex]}
        subs = {"solution": key(ex), **slips, **{how: faked(ex, how) for how in FORGERIES}}
        keys[ex], folders[ex] = KEYS[ex], write(root / ex / "submissions", subs).parent
        tasks += [(ex, name) for name in subs]
    for batch in ("small", "small_again"):
        keys[batch], folders[batch] = root / "small_key.ipynb", write(
            root / batch / "submissions", small_batch()).parent
        tasks += [(batch, name) for name in small_batch()]
    tasks.sort(key=lambda task: (task[0].startswith("small"), task[1].startswith("fake")))

    def one(task: tuple[str, str]) -> Gradebook:
        batch, name = task
        timeout = FAST if batch.startswith("small") else 120
        return grade.grade({name: folders[batch] / "submissions" / f"{name}.ipynb"}, keys[batch],
                           cell_timeout=timeout, timeout=300, keep=folders[batch] / "kept")

    with ThreadPoolExecutor(max_workers=3) as pool:
        done = list(pool.map(one, tasks))
    books = {}
    for (batch, _), part in zip(tasks, done):
        books.setdefault(batch, Gradebook(part.key, part.questions)).results += part.results
    for batch, book in books.items():
        book.write(folders[batch] / "grades")
        book.folder = folders[batch]  # submissions/, grades/ and kept/ are there
    return books


@pytest.fixture(scope="module")
def graded(batches) -> dict[str, Gradebook]:
    """Every exercise's gradebook: the solution, its mistakes, the three fakes."""
    return {ex: batches[ex] for ex in KEYS}


# ---- every exercise: the key scores full marks, a mistake loses its question, fakes score 0 ----

def test_every_exercise_has_a_mistake_and_every_chapter_an_exercise():
    """Every chapter from 01 on has an exercise key, and each key a realistic mistake in this module."""
    assert sorted(KEYS) == CHAPTERS == sorted(MISTAKES)


@pytest.mark.parametrize("ex", sorted(KEYS))
def test_the_instructor_solution_scores_full_marks_and_matches_every_stored_output(graded, ex):
    """Run fresh under nbval, the solution passes every check, and every cell prints what the key stored."""
    book = graded[ex]
    assert book.total("solution") == book.max_total > 0, book.lost("solution")
    log = book.folder / "kept" / "solution" / "cells.jsonl"
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    code_cells = [c for c in key(ex).cells if c.cell_type == "code"]
    assert len(records) == len(code_cells)
    assert [r["outcome"] for r in records] == ["passed"] * len(records), \
        [r["message"][:300] for r in records if r["outcome"] != "passed"]


@pytest.mark.parametrize("ex, student", [(ex, m[0]) for ex in sorted(KEYS) for m in MISTAKES[ex]])
def test_a_realistic_mistake_loses_exactly_its_question(graded, ex, student):
    """One mistake, one lost question, and the reason says what the mistake was."""
    question, words = next((q, w) for name, q, w, _ in MISTAKES[ex] if name == student)
    book = graded[ex]
    assert list(book.lost(student)) == [question]
    assert words in book.lost(student)[question]
    assert book.total(student) == book.max_total - dict(book.questions)[question]


@pytest.mark.parametrize("ex", sorted(KEYS))
@pytest.mark.parametrize("how", sorted(FORGERIES))
def test_a_faked_submission_scores_zero(graded, ex, how):
    """A redefined mt.check, patched judges, or a forged answers file: no points, and a reason each."""
    book = graded[ex]
    assert book.total(how) == 0, book.summary()
    assert all(book.lost(how).values())


def test_forged_verdicts_are_reported_as_tampering(graded):
    """Where the kernel printed ✔ right but handed in a wrong answer (patched judges), the reason
    says so; a check that handed in nothing (a redefined mt.check) is said too."""
    for ex in KEYS:
        reasons = graded[ex].lost("fake_patched_judges")
        assert all("tampered" in r for r in reasons.values()), reasons
        copied = graded[ex].lost("fake_copied_verdicts")
        assert all("handed the grader no answer" in r for r in copied.values()), copied


# ---- feedback files and tables ----

def test_every_student_gets_a_feedback_file_in_mt_checks_words(graded):
    """feedback/<student>.md: the total, then each question's verdict as mt.check words it."""
    folder = graded["03"].folder / "grades" / "feedback"
    assert sorted(p.stem for p in folder.glob("*.md")) == graded["03"].students
    honest = (folder / "solution.md").read_text()
    assert "**3 of 3 points.**" in honest and honest.count("✔ right") == 3
    assert "## q3.2: 1 of 1" in honest
    wrong = (folder / "mean_of_means.md").read_text()
    assert "## q3.1: 0 of 1" in wrong and "✘ not yet: for counts" in wrong
    assert "averaged the replicas' means" in wrong


def test_grading_writes_the_tables(graded):
    """grades.csv (one row per student), details.csv (one per question) and summary.txt."""
    book = graded["03"]
    folder = book.folder / "grades"
    rows = (folder / "grades.csv").read_text().splitlines()
    assert rows[0] == "student,q3.1,q3.2,q3.3,total,max" and len(rows) == 1 + len(book.students)
    assert "solution,1,1,1,3,3" in rows
    assert (folder / "details.csv").read_text().count("\n") == 1 + 3 * len(book.students)
    assert "mean_of_means, q3.1" in (folder / "summary.txt").read_text()


# ---- the failure modes, on the small key without TensorFlow ----

@pytest.fixture(scope="module")
def small_graded(batches) -> Gradebook:
    """The small key's batch (see :func:`small_batch`)."""
    return batches["small"]


def test_the_small_key_scores_full_marks(small_graded):
    """The small key's own solution gets every point."""
    assert small_graded.total("honest") == small_graded.max_total == 3


def test_hidden_inputs_catch_a_table_of_the_public_cases(small_graded):
    """A function that only knows the public cases fails on the key's hidden input."""
    reasons = small_graded.lost("lookup_table")
    assert list(reasons) == ["q7.1"] and "reads [0.0, 0.5, 1.0, 1.5, 2.0]" in reasons["q7.1"]


def test_an_endless_loop_is_stopped_and_only_its_question_is_lost(small_graded):
    """A cell that never ends is interrupted at the cell timeout; later questions still count."""
    reasons = small_graded.lost("endless_loop")
    assert list(reasons) == ["q7.1"]
    assert "NameError" in reasons["q7.1"] and f"did not finish within {FAST} s" in reasons["q7.1"]


def test_a_missing_import_loses_the_questions_that_need_it(small_graded):
    """ModuleNotFoundError in an answer cell: that question is lost and the reason names the module."""
    reasons = small_graded.lost("missing_import")
    assert list(reasons) == ["q7.2"]
    assert "No module named 'horovod'" in reasons["q7.2"] and "NameError" in reasons["q7.2"]


def test_a_killed_kernel_costs_the_questions_after_it_not_the_ones_before(small_graded):
    """A kernel that dies mid-notebook: earlier checks keep their points, later ones get a reason."""
    reasons = small_graded.lost("kernel_killed")
    assert list(reasons) == ["q6.3"]
    assert "kernel running the notebook had died" in reasons["q6.3"]
    assert "the cell `import os, signal` stopped the kernel" in reasons["q6.3"]


def test_an_edited_or_deleted_check_is_put_back_and_judges_the_answer(small_graded):
    """A check cell the student rewrote or deleted is replaced by the key's, which judges the answer."""
    for student in ("edited_check", "deleted_check"):
        reasons = small_graded.lost(student)
        assert list(reasons) == ["q7.2"] and "steady state" in reasons["q7.2"], reasons


def test_records_forged_during_the_checks_are_judged_as_answers(small_graded):
    """Records written by hand while the checks run are answers like any other: judged wrong here,
    and the ✔ the notebook printed over them is reported as tampering."""
    reasons = small_graded.lost("forged_records")
    assert small_graded.total("forged_records") == 0
    assert all("tampered" in r for r in reasons.values()), reasons
    assert "expected your function staleness" in reasons["q7.1"]


def test_the_untouched_handout_scores_zero_with_reasons(small_graded):
    """The student version as released passes no check: its TODOs raise NotImplementedError."""
    assert small_graded.total("untouched_handout") == 0
    assert "NotImplementedError" in small_graded.lost("untouched_handout")["q7.1"]


def test_grading_twice_gives_the_same_tables(batches):
    """Same submissions, same key: byte-identical grades, reasons and feedback on a second run."""
    first, again = batches["small"], batches["small_again"]
    assert again.details_csv() == first.details_csv() and again.grades_csv() == first.grades_csv()
    assert [again.feedback(s) for s in again.students] == [first.feedback(s) for s in first.students]


def test_a_submission_over_its_total_time_is_killed_and_reported(tmp_path):
    """The whole-notebook limit: every question gets a reason, and no process is left behind."""
    import psutil

    nbformat.write(small_key(), tmp_path / "key.ipynb")
    slow = small({"q7-2-answer": "import time\ntime.sleep(60)\npredicted_mean = 15 / 9"})
    folder = write(tmp_path / "subs", {"slow": slow})
    book = grade.grade(folder, tmp_path / "key.ipynb", timeout=4)
    assert book.total("slow") < book.max_total
    assert "stopped after 4 s in total" in book.lost("slow")["q6.3"]
    assert psutil.Process().children(recursive=True) == []


def test_an_unreadable_file_is_graded_zero_without_stopping_the_batch(tmp_path):
    """A file that is not a notebook gets a reason for every question; nothing runs."""
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "garbled.ipynb").write_text("{not json")
    book = grade.grade(folder, KEYS["05"])
    assert book.total("garbled") == 0
    assert all("could not be read as a notebook" in r for r in book.lost("garbled").values())


# ---- the cell log: a plugin module loaded with -p, no conftest.py in the work folder ----

def test_grading_writes_no_conftest_and_loads_none(tmp_path):
    """The work folder gets no conftest.py, and one already there (a --keep folder) is not run."""
    folder = tmp_path / "subs"
    folder.mkdir()
    for student in ("alice", "bob"):
        nbformat.write(small(), folder / f"{student}.ipynb")
    nbformat.write(small_key(), tmp_path / "key.ipynb")
    keep = tmp_path / "keep"
    poisoned = "raise SystemExit('a conftest.py in the work folder was loaded')\n"
    (keep / "bob").mkdir(parents=True)
    (keep / "bob" / "conftest.py").write_text(poisoned)
    book = grade.grade(folder, tmp_path / "key.ipynb", cell_timeout=60, timeout=120, jobs=2,
                       keep=keep)
    assert book.total("alice") == book.total("bob") == 3, book.summary()
    assert not (keep / "alice" / "conftest.py").exists()
    assert (keep / "bob" / "conftest.py").read_text() == poisoned  # left alone, and never loaded
    for student in ("alice", "bob"):
        records = [json.loads(line) for line in
                   (keep / student / "cells.jsonl").read_text(encoding="utf-8").splitlines()]
        assert [(r["cell"], r["outcome"]) for r in records] == [(n, "passed") for n in range(7)]
        assert records[2]["text"].startswith("q7.1 ✔ right")
        assert [json.loads(a)["question"] for a in records[2]["answers"]] == ["q7.1"]


# ---- the command line, end to end ----

def test_the_command_line_grades_and_releases(tmp_path):
    """`python -m mirrortutor.grading release` and `... grade SUBMISSIONS --key` in a fresh Python."""
    run = lambda *args: subprocess.run([sys.executable, "-m", "mirrortutor.grading", *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    released = run("release", str(ROOT / "exercises"), "--out", "handout")
    assert released.returncode == 0 and (tmp_path / "handout" / KEYS["05"].name).exists()
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "garbled.ipynb").write_text("{")
    graded = run("grade", "subs", "--key", str(KEYS["05"]), "--out", "grades")
    assert graded.returncode == 0, graded.stderr
    assert "garbled" in graded.stdout and (tmp_path / "grades" / "grades.csv").exists()
    assert (tmp_path / "grades" / "feedback" / "garbled.md").exists()
    missing = run("grade", "subs", "--key", "no_such_key.ipynb")
    assert missing.returncode == 2 and "error:" in missing.stderr
