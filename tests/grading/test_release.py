"""The grading pieces that need no kernel: release, assemble, the cell log, the command line's
parser, and mt.check itself.

Nothing here runs a notebook or uses TensorFlow: the exercises' instructor notebooks are read and
rearranged, the cell-log plugin runs in a plain pytest, and ``mt.check`` is called directly on
plain answers.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor.errors import ExerciseFormatError, UnknownQuestionError
from mirrortutor.grading import grade, release
from mirrortutor.grading.__main__ import main, parser
from mirrortutor.grading import answers
from mirrortutor.grading.checks import QUESTIONS, check, load_questions, verdict
from mirrortutor.grading.nbval_log import LOG_VARIABLE

from exercise_keys import KEYS, ROOT, key, source


# ---- the exercises and their keys ----

def test_there_is_an_exercise_for_every_chapter_from_01_on():
    """exercises/ holds one instructor notebook per chapter from 01 on, each with check cells."""
    assert {p.name[:2] for p in (ROOT / "notebooks").glob("*.ipynb")} - {"00"} <= set(KEYS)
    for ex in KEYS:
        assert release.check_cells(key(ex))


def test_every_question_has_exactly_one_check_cell():
    """mt.check's questions and the exercises' check cells match one to one."""
    load_questions()
    found = [c.question for ex in KEYS for c in release.check_cells(key(ex))]
    assert sorted(found) == sorted(QUESTIONS)


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


# ---- release: the student version ----

def test_release_removes_solutions_and_keeps_cell_ids_and_checks():
    """The student version: no solution lines, no outputs, same ids, check cells unchanged."""
    for ex in KEYS:
        nb, student = key(ex), release.release(key(ex))
        assert [c.id for c in nb.cells] == [c.id for c in student.cells]
        text = "\n".join(c.source for c in student.cells)
        assert release.BEGIN not in text and release.END not in text
        for k, s in zip(nb.cells, student.cells):
            if release.is_check(k):
                assert s.source == k.source
            if s.cell_type == "code":
                assert s.outputs == [] and s.execution_count is None
        assert "NotImplementedError" in text


def test_a_student_line_replaces_its_solution_block():
    """``# STUDENT:`` lines become the student's starting code, here a buggy loss line."""
    cell = ("    # BEGIN SOLUTION\n    loss = tf.nn.compute_average_loss(l, global_batch_size=64)\n"
            "    # STUDENT: loss = tf.reduce_mean(l)   # TODO: fix this line\n    # END SOLUTION")
    answer = release.strip_solutions(cell)
    assert answer == "    loss = tf.reduce_mean(l)   # TODO: fix this line"


def test_release_strips_the_hidden_inputs_and_the_grader_reads_them():
    """Hidden inputs sit in the key's check cells only: release deletes them, hidden_inputs reads them."""
    for ex in KEYS:
        assert "hidden" not in json.dumps([c.metadata for c in release.release(key(ex)).cells])
    hidden = release.hidden_inputs(key("02"))
    assert list(hidden) == ["q2.1"] and len(hidden["q2.1"]) >= 3
    functions = {q.id for q in load_questions().values() if hasattr(q.kind, "cases")}
    assert functions == {q for ex in KEYS for q in release.hidden_inputs(key(ex))}
    nb = key("02")
    next(c for c in nb.cells if c.id == "q2-1-check").metadata["mirrortutor"]["hidden"] = 5
    with pytest.raises(ExerciseFormatError, match="list of cases"):
        release.hidden_inputs(nb)


def test_hidden_inputs_reach_the_kernel_only_with_the_check_that_uses_them():
    """The graded copy of a function question's check cell hands its cases over on its first
    line; the check takes them out at once, so a later cell finds nothing; no other cell holds
    them."""
    hidden = release.hidden_inputs(key("02"))
    assembly = release.assemble(key("02"), key("02"))
    grade._hand_over_hidden(assembly, hidden)
    code = [c for c in assembly.notebook.cells if c.cell_type == "code"]
    holding = [n for n, c in enumerate(code) if "hand_over" in c.source]
    assert [assembly.check_code_cells[n] for n in holding] == ["q2.1"]
    first, _, rest = code[holding[0]].source.partition("\n")
    assert rest == source("02", "q2-1-check") and "[61, 7]" in first
    scope: dict = {}
    exec(first, scope)  # what the kernel runs first in that cell
    assert answers.hidden_cases("q2.1") == hidden["q2.1"]
    assert answers.hidden_cases("q2.1") == []  # taken: gone


def test_unchanged_cells_keep_the_keys_outputs_and_changed_ones_are_cleared():
    """A cell the student left as the key has it is compared by nbval; an edited one is not."""
    nb = key("04")
    next(c for c in nb.cells if c.id == "q4-1-answer").source += "\n# my note"
    cells = {c.id: c for c in release.assemble(nb, key("04")).notebook.cells}
    assert cells["q4-1-try"].outputs == next(c for c in key("04").cells if c.id == "q4-1-try").outputs
    assert cells["q4-1-try"].outputs and cells["q4-1-answer"].outputs == []
    assert cells["q4-1-answer"].execution_count is None


def test_strip_solutions_refuses_unbalanced_markers():
    """An unclosed or stray marker is an error that names the fix, not a silent leak."""
    with pytest.raises(ExerciseFormatError, match="never closes"):
        release.strip_solutions("# BEGIN SOLUTION\nx = 1")
    with pytest.raises(ExerciseFormatError, match="without a"):
        release.strip_solutions("x = 1\n# END SOLUTION")
    assert release.strip_solutions("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION") == \
        'def f():\n    # TODO: your code here\n    raise NotImplementedError("write your answer here")'


def test_release_never_overwrites_the_instructor_notebooks(tmp_path):
    """--out pointing at exercises/ itself is refused; elsewhere one file per exercise is written."""
    with pytest.raises(ExerciseFormatError, match="overwrite the solutions"):
        release.release_folder(ROOT / "exercises", ROOT / "exercises")
    written = release.release_folder(ROOT / "exercises", tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in KEYS.values())


# ---- assemble: the notebook that is graded ----

def test_checks_go_back_in_place_even_when_deleted_or_moved():
    """A deleted check returns before the next instructor cell; a student's extra cell runs first."""
    nb = key("02")
    answer = [c.id for c in nb.cells].index("q2-1-answer")
    helper = nbformat.v4.new_code_cell("helper = 1", id="student-helper")
    nb.cells.insert(answer + 1, helper)
    nb.cells = [c for c in nb.cells if c.id != "q2-1-check"]
    graded = release.assemble(nb, key("02")).notebook
    ids = [c.id for c in graded.cells]
    assert ids.index("q2-1-answer") < ids.index("student-helper") < ids.index("q2-1-check") \
        < ids.index("q2-2-text")
    assert ids.count("q2-1-check") == 1


def test_a_notebook_without_cell_ids_still_gets_its_checks_by_the_markdown():
    """Old nbformat (no cell ids): checks are placed by the instructor's unchanged markdown cells."""
    nb = key("03")
    for cell in nb.cells:
        cell.pop("id", None)
    graded = release.assemble(nb, key("03"))
    sources = [c.source for c in graded.notebook.cells]
    q31_check, q32_text = source("03", "q3-1-check"), source("03", "q3-2-text")
    assert sources.index(q31_check) + 1 == sources.index(q32_text)
    assert graded.matched > 0


# ---- what the grader reads before it runs anything ----

def test_submissions_are_named_by_file_or_by_their_folder(tmp_path):
    """alice.ipynb is alice; bob/anything.ipynb is bob; the key is never graded as a student."""
    for rel in ["alice.ipynb", "bob/work.ipynb", "carol/a.ipynb", "carol/b.ipynb", "key.ipynb"]:
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found = grade.find_submissions(tmp_path, exclude=tmp_path / "key.ipynb")
    assert sorted(found) == ["alice", "bob", "carol/a", "carol/b"]


def test_the_shipped_sanitizer_is_the_one_make_test_uses():
    """grade.SANITIZE is mirrortutor/grading/nbval_sanitize.cfg, the file the Makefile passes to nbval."""
    shipped = Path(mt.__file__).parent / "grading" / "nbval_sanitize.cfg"
    assert grade.SANITIZE_FILE == shipped
    assert grade.SANITIZE == shipped.read_text(encoding="utf-8")
    assert not Path(mt.__file__).with_name("nbval_sanitize.cfg").exists()  # moved, not copied
    makefile = (ROOT / "Makefile").read_text()
    assert "--nbval-sanitize-with mirrortutor/grading/nbval_sanitize.cfg" in makefile
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string(grade.SANITIZE)
    assert len(cfg.sections()) >= 6


def test_a_key_naming_an_unknown_question_is_refused_before_anything_runs(tmp_path):
    """A check cell whose question id no judge has: an error that says what to correct."""
    nb = key("07")
    next(c for c in nb.cells if c.id == "q7-2-check").metadata["mirrortutor"]["check"] = "q7.9"
    nbformat.write(nb, tmp_path / "key.ipynb")
    with pytest.raises(ExerciseFormatError, match=r"\['q7.9'\].*Add a question"):
        grade.grade(tmp_path, tmp_path / "key.ipynb")


# ---- the cell log, outside any notebook ----

def test_the_cell_log_plugin_loads_with_p_and_imports_no_tensorflow(tmp_path):
    """`pytest -p mirrortutor.grading.nbval_log` logs one JSON line per test, with the answers
    written during that test, hides the log's name from what runs, and loads no TensorFlow."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_three.py").write_text(
        "import os, sys\n\n"
        "def test_light():\n    assert 'tensorflow' not in sys.modules\n"
        f"    assert {LOG_VARIABLE!r} not in os.environ  # a kernel started now cannot find the log\n\n"
        "def test_prints():\n    print('hi')\n"
        "    open(os.environ['MIRRORTUTOR_ANSWERS'], 'a').write('{\"question\": \"q1.1\"}\\n')\n\n"
        "def test_fails():\n    assert 1 == 2\n")
    log = tmp_path / "cells.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({LOG_VARIABLE: str(log), answers.ANSWERS_VARIABLE: str(tmp_path / "answers.jsonl")})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "test_three.py", "-c", "pytest.ini", "--rootdir", ".",
         "-p", "no:cacheprovider", "-p", grade.PLUGIN, "--noconftest", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]  # one test fails
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [r["outcome"] for r in records] == ["passed", "passed", "failed"]
    assert "assert 1 == 2" in records[2]["message"]
    assert [r["answers"] for r in records] == [[], ['{"question": "q1.1"}'], []]  # by cell
    assert grade.PLUGIN == "mirrortutor.grading.nbval_log"


# ---- the command line, parsed ----

def test_the_command_line_has_one_subcommand_per_step():
    """`release SOURCE --out DIR` and `grade SUBMISSIONS --key KEY [options]`, typed."""
    args = parser().parse_args(["release", "exercises", "--out", "handout"])
    assert (args.command, args.source, args.out) == ("release", "exercises", "handout")
    args = parser().parse_args(["grade", "subs", "--key", "k.ipynb", "--cell-timeout", "5",
                                "--timeout", "50", "--jobs", "2", "--keep", "kept"])
    assert (args.command, args.submissions, args.key, args.out, args.cell_timeout, args.timeout,
            args.jobs, args.keep) == ("grade", "subs", "k.ipynb", "grades", 5.0, 50.0, 2, "kept")
    defaults = parser().parse_args(["grade", "subs", "--key", "k.ipynb"])
    assert (defaults.cell_timeout, defaults.timeout, defaults.jobs, defaults.keep,
            defaults.trust_submissions) == (60, 600, 1, None, False)
    assert parser().parse_args(["grade", "s", "--key", "k", "--trust-submissions"]).trust_submissions


@pytest.mark.parametrize("argv, words", [
    (["bogus"], "invalid choice: 'bogus'"),
    ([], "required"),
    (["subs", "--key", "k.ipynb"], "invalid choice: 'subs'"),  # the old form, without `grade`
    (["release", "exercises"], "--out"),
    (["grade", "subs"], "--key"),
])
def test_a_bad_command_line_exits_2_with_its_usage(capsys, argv, words):
    """A missing or unknown subcommand, or a missing option: exit code 2, usage and the reason."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m mirrortutor.grading") and words in err


def test_help_lists_both_steps_and_the_old_entry_is_gone():
    """`python -m mirrortutor.grading --help` works and names both steps; mirrortutor.grade is gone."""
    run = lambda *args: subprocess.run([sys.executable, "-m", "mirrortutor.grading", *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    top = run("--help")
    assert top.returncode == 0, top.stderr
    assert top.stdout.startswith("usage: python -m mirrortutor.grading")
    assert "release" in top.stdout and "grade" in top.stdout
    step = run("grade", "--help")
    assert step.returncode == 0 and "--cell-timeout" in step.stdout and "--key" in step.stdout
    assert importlib.util.find_spec("mirrortutor.grade") is None


# ---- mt.check ----

def test_check_prints_plain_verdicts_and_refuses_unknown_questions(capsys):
    """mt.check says right / not yet in words; an unknown id raises with the known ones listed."""
    check("q1.3", 21.0)
    check("q1.3", 6)
    check("q1.3", ...)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("q1.3 ✔ right") and "replica 0's copy" in out[1] and "no answer yet" in out[2]
    with pytest.raises(UnknownQuestionError, match="q1.1"):
        check("q99", 1)


def test_a_right_answer_prints_the_same_text_whatever_its_rounding(capsys):
    """Sums in another order (float32, 8 replicas) must not change a graded verdict."""
    check("q3.2", np.float32(58) / np.float32(64) + np.float32(1e-7))
    check("q3.2", 0.9062499)
    first, second = capsys.readouterr().out.splitlines()
    assert first == second and "✔ right" in first


def test_an_answer_of_zero_gets_a_verdict_not_a_crash(capsys):
    """q3.2 and q3.3 with 0 (a step that applied nothing) say what is wrong; no ZeroDivisionError."""
    check("q3.2", 0)
    check("q3.3", (0, "A"))
    check("q3.3", (0.0, None))
    out = capsys.readouterr().out.splitlines()
    assert all("✘ not yet" in line for line in out) and "scale is 0" in out[1]


def test_a_verdict_is_reached_from_data_alone_and_never_raises():
    """verdict() judges plain data the same way mt.check does; malformed data gets a verdict."""
    load_questions()
    q = QUESTIONS["q2.1"]
    round_robin = q.kind.export(lambda g, n: [len(range(r, g, n)) for r in range(n)], [])
    ok, line = verdict(q, answers.normalised(round_robin), [])
    assert not ok and "split_sizes(58, 4) returned [15, 15, 14, 14]" in line
    for junk in (None, 3, "x", [1, 2], {"callable": True, "calls": "nope"}, {"calls": [{}]}):
        for question in QUESTIONS.values():
            ok, line = verdict(question, junk, [])
            assert ok is False and line.startswith(f"{question.id} ✘ not yet: ")


def test_a_function_answer_runs_on_the_hidden_cases_too():
    """With the grader's hidden inputs a function is called on them; without a call, it is wrong."""
    load_questions()
    q = QUESTIONS["q2.1"]
    hidden = [[61, 7]]

    def split(g, n):
        per = -(-g // n)
        return [max(0, min(per, g - per * r)) for r in range(n)]

    data = answers.normalised(q.kind.export(split, hidden))
    assert [c["case"] for c in data["calls"]][-1] == [61, 7] and verdict(q, data, hidden)[0]
    public_only = answers.normalised(q.kind.export(split, []))
    ok, line = verdict(q, public_only, hidden)
    assert not ok and "split_sizes(61, 7) was never called" in line


def test_a_function_that_calls_mirrortutor_is_refused(capsys):
    """Calling the package's own reference is not an answer: the verdict says to write the rule."""
    def all_gather(buffers):
        return mt.allreduce.ring(buffers).values  # the reference, not an answer

    check("q4.1", all_gather)
    assert "calls mirrortutor" in capsys.readouterr().out


def test_the_grading_modules_import_no_tensorflow():
    """Checks, release, grading, the cell log and the command line load without TF, plotly, widgets."""
    from conftest import run_python

    result = run_python("""
        import sys
        import mirrortutor.grading.__main__, mirrortutor.grading.checks, mirrortutor.grading.grade
        import mirrortutor.grading.gradebook, mirrortutor.grading.nbval_log
        import mirrortutor.grading.questions, mirrortutor.grading.release
        print(sorted(m for m in ("tensorflow", "plotly", "ipywidgets") if m in sys.modules))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_mt_check_is_the_grading_check():
    """The public mt.check is mirrortutor.grading.checks.check, not a copy."""
    assert mt.check is check
