"""Exercises and their grading: keys score full marks, each realistic mistake loses its question.

Grading spawns a kernel per submission (about 5 s each, TensorFlow's import), so every exercise's
submissions are graded in ONE batch, once per test module (the ``graded`` fixture), two at a time;
the tests then read the resulting gradebooks. Each wrong submission is the solution with one
realistic mistake, so exactly one question must be lost, with a reason that names the mistake.
"""

from __future__ import annotations

import configparser
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from mirrortutor import exercises, grade, questions, questions_ps
from mirrortutor.checks import QUESTIONS, check
from mirrortutor.errors import ExerciseFormatError, UnknownQuestionError
from mirrortutor.gradebook import Gradebook

ROOT = Path(__file__).resolve().parents[1]
KEYS = {p.name[:2]: p for p in sorted((ROOT / "exercises").glob("*.ipynb"))}
FAST = 25  # seconds per cell in exercise 02's batch (the endless loop and the killed kernel)


def key(ex: str) -> nbformat.NotebookNode:
    return nbformat.read(KEYS[ex], as_version=4)


def source(ex: str, cell_id: str) -> str:
    """The key's source of one cell."""
    return next(c.source for c in key(ex).cells if c.id == cell_id)


def edit(ex: str, answers: dict[str, str] | None = None, drop=(), checks: dict[str, str] | None = None):
    """The solution notebook with cells replaced (by cell id) or dropped: one student's work."""
    answers, checks = answers or {}, checks or {}
    nb = key(ex)
    nb.cells = [c for c in nb.cells if c.id not in drop]
    for cell in nb.cells:
        if cell.id in answers or cell.id in checks:
            cell.source = answers.get(cell.id) or checks[cell.id]
    return nb


def submissions(ex: str) -> dict[str, nbformat.NotebookNode]:
    """The batch for one exercise: the solution, the mistakes, and the broken ones."""
    subs = {"solution": key(ex)}
    if ex == "01":
        subs["sum_not_mean"] = edit(ex, {"q1-1-answer": "prediction = 2.0 + 3.5"})
    if ex == "02":
        subs["off_by_one"] = edit(ex, {"q2-1-answer": (
            "def split_sizes(global_batch_size, num_replicas):\n"
            "    per_replica = global_batch_size // num_replicas\n"
            "    return [per_replica] * (num_replicas - 1) + "
            "[global_batch_size - per_replica * (num_replicas - 1)]")})
        subs["endless_loop"] = edit(ex, {"q2-1-answer": "while True:\n    pass"})
        subs["kernel_killed"] = edit(ex, {"q2-2-answer": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"})
    if ex == "03":
        per_replica = source(ex, "q3-2-answer").replace(
            "loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)",
            "loss = tf.reduce_mean(per_example_loss)")
        mean = ("def allreduce_sum(per_replica):\n"
                "    return [sum(per_replica) / len(per_replica) for _ in per_replica]")
        subs["per_replica_loss"] = edit(ex, {"q3-2-answer": per_replica})
        subs["edited_check"] = edit(ex, {"q3-1-answer": mean}, checks={
            "q3-1-check": f'print("q3.1 ✔ right: {QUESTIONS["q3.1"].right}")'})
        subs["deleted_check"] = edit(ex, {"q3-2-answer": per_replica}, drop={"q3-2-check"})
    if ex == "04":
        subs["n_steps"] = edit(ex, {"q4-1-answer": source(ex, "q4-1-answer").replace(
            "range(n - 1)", "range(n)")})
        subs["untouched_handout"] = exercises.release(key(ex))
    if ex == "05":
        subs["most_gpus"] = edit(ex, {"q5-1-answer": source(ex, "q5-1-answer").replace(
            "choice = max(estimates, key=lambda name: estimates[name].speedup)",
            "choice = max(estimates, key=lambda name: estimates[name].num_replicas)")})
        subs["missing_import"] = edit(ex, {"q5-1-answer": "import horovod.tensorflow as hvd\n"
                                          + source(ex, "q5-1-answer")})
    if ex == "06":
        subs["rounds_down"] = edit(ex, {"q6-2-answer": source(ex, "q6-2-answer").replace(
            "math.ceil(size / min_shard_bytes)", "size // min_shard_bytes")})
    if ex == "07":
        subs["counts_itself"] = edit(ex, {"q7-1-answer": source(ex, "q7-1-answer").replace(
            "(applies < applies[i])", "(applies <= applies[i])")})
    return subs


def write(folder: Path, subs: dict[str, nbformat.NotebookNode]) -> Path:
    folder.mkdir(parents=True)
    for name, nb in subs.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, Gradebook]:
    """Every exercise's batch, graded once (two submissions at a time)."""
    books = {}
    for ex in KEYS:
        folder = write(tmp_path_factory.mktemp(f"ex{ex}") / "submissions", submissions(ex))
        timeout = FAST if ex == "02" else 60
        books[ex] = grade.grade(folder, KEYS[ex], out=folder.parent / "grades", cell_timeout=timeout,
                                timeout=300, jobs=2)
    return books


def lost(book, student) -> dict[str, str]:
    return book.lost(student)


# ---- every exercise: the key scores full marks, a realistic mistake loses exactly its question ----

def test_there_is_an_exercise_for_every_chapter_from_01_to_05():
    """exercises/ holds one instructor notebook per chapter 01–05 (07 too), each with check cells."""
    assert {"01", "02", "03", "04", "05"} <= set(KEYS)
    for ex in KEYS:
        assert exercises.check_cells(key(ex))


@pytest.mark.parametrize("ex", sorted(KEYS))
def test_the_instructor_solution_scores_full_marks(graded, ex):
    """Run fresh under nbval, the solution passes every check the key stores."""
    book = graded[ex]
    assert book.total("solution") == book.max_total > 0, book.lost("solution")


@pytest.mark.parametrize("ex, student, question, words", [
    ("01", "sum_not_mean", "q1.1", "assign_add"),
    ("02", "off_by_one", "q2.1", "ceil(58 / 4) = 15"),
    ("03", "per_replica_loss", "q3.2", "4 times the full-batch gradient"),
    ("03", "edited_check", "q3.1", "MEAN"),
    ("03", "deleted_check", "q3.2", "OWN batch size"),
    ("04", "n_steps", "q4.1", "the ring gives"),
    ("05", "most_gpus", "q5.1", "compare each estimate's speedup"),
    ("06", "rounds_down", "q6.2", "rounds UP"),
    ("07", "counts_itself", "q7.1", "count only the others"),
])
def test_a_realistic_mistake_loses_exactly_its_question(graded, ex, student, question, words):
    """One mistake, one lost question, and the reason says what the mistake was."""
    book = graded[ex]
    assert list(lost(book, student)) == [question]
    assert words in lost(book, student)[question]
    assert book.total(student) == book.max_total - dict(book.questions)[question]


def test_an_endless_loop_is_stopped_and_only_its_question_is_lost(graded):
    """A cell that never ends is interrupted at the cell timeout; later questions still count."""
    reasons = lost(graded["02"], "endless_loop")
    assert list(reasons) == ["q2.1"]
    assert "NameError" in reasons["q2.1"] and f"did not finish within {FAST} s" in reasons["q2.1"]


def test_a_killed_kernel_costs_the_questions_after_it_not_the_ones_before(graded):
    """A kernel that dies mid-notebook: earlier checks keep their points, later ones get a reason."""
    reasons = lost(graded["02"], "kernel_killed")
    assert list(reasons) == ["q2.2"]
    assert "kernel running the notebook had died" in reasons["q2.2"]
    assert "the cell `import os, signal` stopped the kernel" in reasons["q2.2"]


def test_a_missing_import_loses_the_questions_that_need_it(graded):
    """ModuleNotFoundError in an answer cell: that question is lost and the reason names the module."""
    reasons = lost(graded["05"], "missing_import")
    assert list(reasons) == ["q5.1"]
    assert "No module named 'horovod'" in reasons["q5.1"] and "NameError" in reasons["q5.1"]


def test_the_untouched_handout_scores_zero_with_reasons(graded):
    """The student version as released passes no check: its TODOs raise NotImplementedError."""
    book = graded["04"]
    assert book.total("untouched_handout") == 0
    assert "NotImplementedError" in lost(book, "untouched_handout")["q4.1"]


def test_grading_writes_the_tables(graded, tmp_path):
    """grades.csv (one row per student), details.csv (one per question) and summary.txt."""
    book = graded["03"]
    paths = book.write(tmp_path)
    rows = paths[0].read_text().splitlines()
    assert rows[0] == "student,q3.1,q3.2,total,max" and len(rows) == 1 + len(book.students)
    assert "solution,1,1,2,2" in rows
    details = paths[1].read_text()
    assert details.count("\n") == 1 + 2 * len(book.students)
    assert "edited_check, q3.1" in paths[2].read_text()


def test_grading_twice_gives_the_same_tables(graded, tmp_path):
    """Same submissions, same key: byte-identical grades and reasons on a second run."""
    folder = write(tmp_path / "again", submissions("04"))
    again = grade.grade(folder, KEYS["04"], cell_timeout=60, timeout=300, jobs=2)
    assert again.details_csv() == graded["04"].details_csv()


def test_a_submission_over_its_total_time_is_killed_and_reported(tmp_path):
    """The whole-notebook limit: every question gets a reason, and no process is left behind."""
    import psutil

    folder = write(tmp_path / "subs", {"slow": key("04")})
    book = grade.grade(folder, KEYS["04"], timeout=2)
    assert book.total("slow") == 0
    assert all("stopped after 2 s in total" in r for r in book.lost("slow").values())
    assert psutil.Process().children(recursive=True) == []


def test_an_unreadable_file_is_graded_zero_without_stopping_the_batch(tmp_path):
    """A file that is not a notebook gets a reason for every question; nothing runs."""
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "garbled.ipynb").write_text("{not json")
    book = grade.grade(folder, KEYS["05"])
    assert book.total("garbled") == 0
    assert all("could not be read as a notebook" in r for r in book.lost("garbled").values())


# ---- the pieces, without kernels ----

def test_release_removes_solutions_and_keeps_cell_ids_and_checks():
    """The student version: no solution lines, no outputs, same ids, check cells unchanged."""
    for ex in KEYS:
        nb, student = key(ex), exercises.release(key(ex))
        assert [c.id for c in nb.cells] == [c.id for c in student.cells]
        text = "\n".join(c.source for c in student.cells)
        assert exercises.BEGIN not in text and exercises.END not in text
        for k, s in zip(nb.cells, student.cells):
            if exercises.is_check(k):
                assert s.source == k.source
            if s.cell_type == "code":
                assert s.outputs == [] and s.execution_count is None
        assert "NotImplementedError" in text


def test_a_student_line_replaces_its_solution_block():
    """``# STUDENT:`` lines become the student's starting code, here the buggy loss line."""
    student = exercises.release(key("03"))
    source = next(c.source for c in student.cells if c.id == "q3-2-answer")
    assert "loss = tf.reduce_mean(per_example_loss)" in source
    assert "compute_average_loss" not in source


def test_strip_solutions_refuses_unbalanced_markers():
    """An unclosed or stray marker is an error that names the fix, not a silent leak."""
    with pytest.raises(ExerciseFormatError, match="never closes"):
        exercises.strip_solutions("# BEGIN SOLUTION\nx = 1")
    with pytest.raises(ExerciseFormatError, match="without a"):
        exercises.strip_solutions("x = 1\n# END SOLUTION")
    assert exercises.strip_solutions("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION") == \
        'def f():\n    # TODO: your code here\n    raise NotImplementedError("write your answer here")'


def test_release_never_overwrites_the_instructor_notebooks(tmp_path):
    """--out pointing at exercises/ itself is refused; elsewhere one file per exercise is written."""
    with pytest.raises(ExerciseFormatError, match="overwrite the solutions"):
        exercises.release_folder(ROOT / "exercises", ROOT / "exercises")
    written = exercises.release_folder(ROOT / "exercises", tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in KEYS.values())


def test_checks_go_back_in_place_even_when_deleted_or_moved():
    """A deleted check returns before the next instructor cell; a student's extra cell runs first."""
    nb = key("02")
    answer = [c.id for c in nb.cells].index("q2-1-answer")
    helper = nbformat.v4.new_code_cell("helper = 1", id="student-helper")
    nb.cells.insert(answer + 1, helper)
    nb.cells = [c for c in nb.cells if c.id != "q2-1-check"]
    graded = exercises.assemble(nb, key("02")).notebook
    ids = [c.id for c in graded.cells]
    assert ids.index("q2-1-answer") < ids.index("student-helper") < ids.index("q2-1-check") \
        < ids.index("q2-2-text")
    assert ids.count("q2-1-check") == 1


def test_submissions_are_named_by_file_or_by_their_folder(tmp_path):
    """alice.ipynb is alice; bob/anything.ipynb is bob; the key is never graded as a student."""
    for rel in ["alice.ipynb", "bob/work.ipynb", "carol/a.ipynb", "carol/b.ipynb", "key.ipynb"]:
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found = grade.find_submissions(tmp_path, exclude=tmp_path / "key.ipynb")
    assert sorted(found) == ["alice", "bob", "carol/a", "carol/b"]


def test_the_shipped_sanitizer_is_the_one_make_test_uses():
    """grade.SANITIZE is the package's nbval_sanitize.cfg, the file the Makefile passes to nbval."""
    shipped = Path(mt.__file__).with_name("nbval_sanitize.cfg")
    assert grade.SANITIZE == shipped.read_text(encoding="utf-8")
    assert "--nbval-sanitize-with mirrortutor/nbval_sanitize.cfg" in (ROOT / "Makefile").read_text()
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string(grade.SANITIZE)
    assert len(cfg.sections()) >= 6


def test_every_question_has_exactly_one_check_cell():
    """mt.check's questions and the exercises' check cells match one to one."""
    found = [c.question for ex in KEYS for c in exercises.check_cells(key(ex))]
    assert sorted(found) == sorted(QUESTIONS)


def test_check_prints_plain_verdicts_and_refuses_unknown_questions(capsys):
    """mt.check says right / not yet in words; an unknown id raises with the known ones listed."""
    check("q1.3", 11.0)
    check("q1.3", 10)
    check("q1.3", ...)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("q1.3 ✔ right") and "old 1.0" in out[1] and "no answer yet" in out[2]
    with pytest.raises(UnknownQuestionError, match="q1.1"):
        check("q99", 1)


def test_a_right_answer_prints_the_same_text_whatever_its_rounding(capsys):
    """Sums in another order (float32, 8 replicas) must not change a graded verdict."""
    check("q3.2", np.float32(1.0000002))
    check("q3.2", 0.9999997)
    first, second = capsys.readouterr().out.splitlines()
    assert first == second


@pytest.mark.parametrize("n", [3, 4, 8])
def test_the_batch_split_rule_is_tensorflows(devices, n):
    """questions.tf_split agrees with experimental_distribute_dataset, uneven batches included."""
    strategy = mt.MirroredStrategy(devices[:n])
    for global_batch in (64, 58, 50, 13, 5):
        batch = next(iter(strategy.experimental_distribute_dataset(
            tf.data.Dataset.range(global_batch).batch(global_batch))))
        sizes = [int(t.shape[0]) for t in strategy.experimental_local_results(batch)]
        assert sizes == questions.tf_split(global_batch, n)


def test_the_staleness_rule_is_version_applied_minus_version_read():
    """q7.1's reference counts exactly what AsyncTrace calls staleness, from the same log."""
    for reads, applies in questions_ps.TIMELINES:
        read_version = [sum(1 for t in applies if t < r) for r in reads]  # updates before the read
        applied_version = list(range(len(applies)))  # updates are logged in the order applied
        assert questions_ps.staleness_of(reads, applies) == [
            a - r for a, r in zip(applied_version, read_version)]


def test_the_placement_rule_is_what_a_real_cluster_does():
    """q6.1's round-robin rule matches where a real ParameterServerStrategy puts 5 variables."""
    from conftest import run_python

    result = run_python("""
        import json, warnings
        import mirrortutor as mt, tensorflow as tf
        mt.setup(2, quiet=True)
        warnings.simplefilter("ignore")
        with mt.LocalCluster(workers=1, ps=2, mode="in_process") as cluster:
            with cluster.strategy.scope():
                made = [tf.Variable(float(i)) for i in range(5)]
            print(json.dumps([int(v.device.split("task:")[1][0]) for v in made]))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == questions_ps.ps_placement(5, 2)


def test_the_scenario_verdict_quotes_the_cost_model():
    """q5.1's message uses estimate_step's speed-ups, and B really is the fastest option."""
    speedups = {k: mt.costmodel.estimate_step(25.6e6, 0.1, o["num_replicas"], o["interconnect"],
                                              algorithm=o["algorithm"]).speedup
                for k, o in questions.OPTIONS.items()}
    assert max(speedups, key=speedups.get) == "B"
    assert f"about {speedups['B']:.1f} times" in QUESTIONS["q5.1"].right
    assert math.isclose(speedups["A"], 16 * 0.1 / mt.costmodel.estimate_step(
        25.6e6, 0.1, 16, "eth-10g").step_s)


def test_the_command_line_grades_and_releases(tmp_path):
    """`python -m mirrortutor.grade release` and `... SUBMISSIONS --key` in a fresh interpreter."""
    run = lambda *args: subprocess.run([sys.executable, "-m", "mirrortutor.grade", *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    released = run("release", str(ROOT / "exercises"), "--out", "handout")
    assert released.returncode == 0 and (tmp_path / "handout" / KEYS["05"].name).exists()
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "garbled.ipynb").write_text("{")
    graded = run("subs", "--key", str(KEYS["05"]), "--out", "grades")
    assert graded.returncode == 0, graded.stderr
    assert "garbled" in graded.stdout and (tmp_path / "grades" / "grades.csv").exists()
    missing = run("subs", "--key", "no_such_key.ipynb")
    assert missing.returncode == 2 and "error:" in missing.stderr


def test_a_notebook_without_cell_ids_still_gets_its_checks_by_the_markdown():
    """Old nbformat (no cell ids): checks are placed by the instructor's unchanged markdown cells."""
    nb = key("03")
    for cell in nb.cells:
        cell.pop("id", None)
    graded = exercises.assemble(nb, key("03"))
    sources = [c.source for c in graded.notebook.cells]
    q31_check, q32_text = source("03", "q3-1-check"), source("03", "q3-2-setup-text")
    assert sources.index(q31_check) + 1 == sources.index(q32_text)
    assert graded.matched > 0


@pytest.mark.parametrize("ex", sorted(KEYS))
def test_exercises_read_like_the_course_and_use_only_public_names(ex):
    """First cell sets up 8 replicas; code uses mt.<public name> only; the file stays small."""
    nb = key(ex)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert "import mirrortutor as mt" in code[0] and "mt.setup(8)" in code[0]
    for src in code:
        assert "mirrortutor." not in src.replace("import mirrortutor as mt", "")
        for name in re.findall(r"\bmt\.(\w+)", src):
            assert name in mt.__all__, f"mt.{name} is not public"
    assert KEYS[ex].stat().st_size < 100_000
