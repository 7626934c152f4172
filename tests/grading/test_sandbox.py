"""Grading is safe to run on a teacher's machine: each submission is sealed off (issue 26).

One batch, graded once, sealed (the default): two honest students and one submission per attack
of :mod:`attacks`, on the small key (no TensorFlow), two at a time. Each attack must score 0 on
the question it replaced and full marks on the others, with a plain reason; the honest students
keep full marks, and the key, the class's notebooks, the grades and the installed package are
unchanged. One attack is also graded unsealed, to show it is a real one; and where no sandbox can
be made (simulated by the grader's own probe saying so), grading stops unless trusted.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
from pathlib import Path

import nbformat
import pytest

import mirrortutor
from mirrortutor.errors import SandboxError
from mirrortutor.grading import grade, sandbox
from mirrortutor.grading.gradebook import NOT_SEALED, Gradebook

from attacks import ATTACKS, MEAN, attack
from submissions import small, small_key

CELL_TIMEOUT = 10  # seconds per cell: the sleeper is interrupted after this
#: The small key needs few tasks; a lower process limit than TensorFlow's default ends the fork
#: bomb sooner (it forks a copy of the kernel each time, up to the limit).
LIMITS = sandbox.Limits(processes=256)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def protected() -> list[Path]:
    """Files an attack would change: the package's judges and an installed dependency."""
    return [Path(mirrortutor.__file__).parent / "grading" / "checks.py",
            Path(nbformat.__file__)]


@pytest.fixture(scope="module")
def listener():
    """A server on the host's loopback that would hand out q7.2's answer; counts connections."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.sendall(b"1.6666666666666667")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


@pytest.fixture(scope="module")
def batch(tmp_path_factory, listener) -> Gradebook:
    """Every attack and two honest students, graded sealed into grades/; the files they aimed
    at are hashed before and after (``book.before`` / ``book.after``)."""
    assert sandbox.probe() is None, f"this machine cannot seal submissions: {sandbox.probe()}"
    root = tmp_path_factory.mktemp("attacked")
    key, subs, grades = root / "key.ipynb", root / "submissions", root / "grades"
    nbformat.write(small_key(), key)
    subs.mkdir()
    places = dict(key=str(key), submissions=str(subs), grades=str(grades), port=listener[0],
                  grader=os.getpid())
    notebooks = {"honest": small(), "zz_classmate": small(),
                 **{name: attack(name, **places) for name in ATTACKS}}
    for name, nb in notebooks.items():
        nbformat.write(nb, subs / f"{name}.ipynb")
    files = [key, *sorted(subs.glob("*.ipynb")), *protected()]
    before = {p: digest(p) for p in files}
    book = grade.grade(subs, key, out=grades, cell_timeout=CELL_TIMEOUT, timeout=120, jobs=2,
                       limits=LIMITS)
    book.before, book.after = before, {p: digest(p) for p in files if p.exists()}
    book.root, book.accepted = root, listener[1]
    return book


def only_lost(book: Gradebook, student: str, *words: str) -> str:
    """The attack lost exactly the question it replaced, and the reason says one of ``words``."""
    question = "q7.1" if ATTACKS[student][0] != MEAN else "q7.2"
    lost = book.lost(student)
    assert list(lost) == [question], (student, lost)
    assert any(w in lost[question] for w in words), (student, lost[question])
    return lost[question]


def test_the_honest_students_score_full_marks(batch):
    """The class around the attacks is graded as if they were not there."""
    assert batch.sealed and batch.total("honest") == batch.total("zz_classmate") == 3, batch.summary()


def test_the_key_can_be_read_neither_from_its_path_nor_found_by_a_search(batch):
    """The instructor's notebook is not in the sandbox: its path does not exist, and a search
    of the usual folders finds nothing; the key file is unchanged."""
    only_lost(batch, "key_by_path", "FileNotFoundError")
    only_lost(batch, "key_by_search", "NameError: name 'staleness' is not defined")


def test_a_classmates_notebook_can_be_neither_read_nor_changed(batch):
    """A submission graded first cannot copy or overwrite the next one's notebook."""
    only_lost(batch, "aa_classmate_copier", "FileNotFoundError")
    victim = batch.root / "submissions" / "zz_classmate.ipynb"
    assert batch.after[victim] == batch.before[victim] and batch.total("zz_classmate") == 3


def test_the_grades_folder_and_the_graders_files_cannot_be_written(batch):
    """The grades written are the grader's own, and no forged record reached the grader: the
    folders the attack made and wrote were the sandbox's own, gone with it."""
    only_lost(batch, "grades_writer", "should be one number, but it is None")
    grades = batch.root / "grades"
    assert not (grades / "forged.txt").exists()
    assert (grades / "grades.csv").read_text() == batch.grades_csv()


def test_the_installed_package_cannot_be_edited(batch):
    """The package and the environment are read-only in the sandbox (and, for a root grader, not
    the kernel's user's): not a byte changes."""
    only_lost(batch, "package_editor", "Read-only file system", "Permission denied")
    assert all(batch.after[p] == batch.before[p] for p in protected())


def test_no_network_connection_can_be_opened(batch, listener):
    """The kernel's loopback is its own: the host's server is never reached."""
    only_lost(batch, "network", "ConnectionRefusedError")
    assert batch.accepted == []


def test_a_fork_bomb_is_stopped_by_the_process_limit(batch):
    """RLIMIT_NPROC, counted in the sandbox's user namespace, bounds the bomb; the cell's
    timeout ends it. It loses its own question and keeps the one before; the one after counts
    when the kernel could be interrupted in time, else it is lost to the dead kernel, like any
    kernel a cell kills (on a busy machine the bomb's copies outlast the interrupt)."""
    lost = batch.lost("fork_bomb")
    assert "q7.1" not in lost and "q7.2" in lost, lost
    assert set(lost) <= {"q7.2", "q6.3"}
    if "q6.3" in lost:
        assert "the kernel running the notebook had died" in lost["q6.3"], lost


def test_filling_the_disk_stops_at_the_file_size_limit(batch):
    """A file stops growing at Limits.file_mb (RLIMIT_FSIZE); every file is on the sandbox's tmpfs."""
    only_lost(batch, "disk_filler", "File too large")


def test_the_grader_cannot_be_killed(batch):
    """The kernel sees no process but its own and its init, which ignores it."""
    only_lost(batch, "grader_killer", "NameError: name 'predicted_mean' is not defined")


def test_a_cell_that_deletes_files_deletes_nothing_of_the_teachers(batch):
    """The key, the class's notebooks and the grades survive an rm -rf of everything in reach."""
    only_lost(batch, "deleter", "NameError: name 'predicted_mean' is not defined")
    assert all(p.exists() and batch.after[p] == batch.before[p] for p in batch.before)
    assert (batch.root / "grades" / "grades.csv").exists()


def test_a_cell_that_sleeps_forever_is_stopped_at_the_cell_timeout(batch):
    """The sleep is interrupted; the next question still counts."""
    only_lost(batch, "sleeper", f"did not finish within {CELL_TIMEOUT} s")


# ---- without a sandbox ----

def unsealed(monkeypatch):
    """Make the grader's own probe say that no sandbox can be made here."""
    monkeypatch.setattr(sandbox, "probe", lambda: "this test says so")


def test_unsealed_the_key_by_path_attack_scores_full_marks(tmp_path, monkeypatch):
    """The attack is real: run as the teacher (--trust-submissions), it copies the key's solution."""
    unsealed(monkeypatch)
    nbformat.write(small_key(), tmp_path / "key.ipynb")
    folder = tmp_path / "subs"
    folder.mkdir()
    nbformat.write(attack("key_by_path", key=str(tmp_path / "key.ipynb")), folder / "cheat.ipynb")
    book = grade.grade(folder, tmp_path / "key.ipynb", cell_timeout=30, timeout=120,
                       trust_submissions=True)
    assert book.total("cheat") == 3 and not book.sealed


def test_without_a_sandbox_grading_stops_unless_trusted(tmp_path, monkeypatch):
    """No sandbox: a SandboxError that says why and what to do; with trust, every report says
    the run was not sealed."""
    unsealed(monkeypatch)
    nbformat.write(small_key(), tmp_path / "key.ipynb")
    folder = tmp_path / "subs"
    folder.mkdir()
    nbformat.write(small(), folder / "alice.ipynb")
    with pytest.raises(SandboxError, match="this test says so.*--trust-submissions"):
        grade.grade(folder, tmp_path / "key.ipynb")
    book = grade.grade(folder, tmp_path / "key.ipynb", trust_submissions=True, out=tmp_path / "out")
    assert book.total("alice") == 3
    assert NOT_SEALED in book.summary() and NOT_SEALED in book.feedback("alice")
    assert NOT_SEALED in (tmp_path / "out" / "summary.txt").read_text()


def test_a_key_in_a_folder_the_kernel_is_shown_is_refused():
    """A key inside the Python environment would be readable in the sandbox: refused, in words."""
    with pytest.raises(SandboxError, match="which the sealed kernel is shown"):
        sandbox.require(False, Path(sys.prefix) / "key.ipynb")


def test_the_sealed_kernel_inherits_no_secret_of_the_graders_environment(monkeypatch):
    """Only a short list of variables passes: no token, no path of the grader's, no hidden inputs."""
    monkeypatch.setenv("TEACHER_TOKEN", "secret")
    env = sandbox.kernel_env()
    assert "TEACHER_TOKEN" not in env and env["HOME"] == sandbox.SCRATCH
    assert not [k for k in env if k.startswith("MIRRORTUTOR_") and k != "MIRRORTUTOR_ANSWERS"]


def test_a_python_reached_through_a_linked_venv_runs_sealed(tmp_path):
    """A venv that is a symbolic link to another (a class's shared venv, say): the view binds the
    real folder, and the kernel, started by the link's path, still finds its Python there."""
    import subprocess

    link = tmp_path / "venv"
    link.symlink_to(sys.prefix, target_is_directory=True)
    python = link / "bin" / Path(sys.executable).name
    probe = "from mirrortutor.grading import sandbox; print(sandbox.probe())"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None", done.stdout
