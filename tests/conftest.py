"""Shared set-up for the tests, grouped as the package is: core, record, training, clusters, plots,
grading, and the package as a whole.

TensorFlow's devices are fixed once its runtime starts, so every test process works with the
same 8 logical CPU devices, made before the first test module that may use TensorFlow is imported.
``tests/core`` needs no TensorFlow at all: ``pytest tests/core`` (``make test-fast``) runs in
seconds and never imports it. Tests that need a fresh TensorFlow (e.g. "setup after TF started")
run a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mirrortutor as mt

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))  # the shared helpers module, for every test folder

_devices: list[str] = []


def tf_devices() -> list[str]:
    """The 8 logical CPU devices, made on first use (before any TensorFlow op)."""
    if not _devices:
        _devices.extend(mt.setup(8, quiet=True))
    return _devices


def pytest_collect_file(file_path, parent):
    """Before a test module outside tests/core is imported, give TensorFlow its 8 devices."""
    if file_path.suffix == ".py" and file_path.name.startswith("test_") and \
            TESTS in file_path.parents and "core" not in file_path.relative_to(TESTS).parts:
        tf_devices()


@pytest.fixture(autouse=True)
def _collective_keys_of_its_own():
    """Every test's MirroredStrategies number their collective groups from a base no earlier test
    used (mt.new_collective_keys, as TensorFlow's own tests do between strategies): the tests
    share one process, and TF's default base would make a test over 3 replicas join the group of
    an earlier test's 2 and fail. tests/record/test_collective_keys.py checks that failure."""
    if "tensorflow" in sys.modules:
        mt.new_collective_keys()
    yield


@pytest.fixture(scope="session")
def devices() -> list[str]:
    """The 8 logical CPU device names, in replica order."""
    return tf_devices()


def run_python(code: str, timeout: float = 300, *, contained: bool = False
               ) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python (a fresh TensorFlow), return its output.

    ``contained=True`` runs it as the course's kernel runs: under ``unshare -rn``, in a network
    namespace whose only interface is its own loopback (brought up first).
    """
    env = dict(os.environ)
    code = textwrap.dedent(code)
    prefix = []
    if contained:
        prefix = ["unshare", "-rn"]
        code = ("from mirrortutor.clusters.processes import loopback_up\nloopback_up()\n" + code)
    return subprocess.run(prefix + [sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=timeout, env=env)


# ---- chapters 00–05 run once ------------------------------------------------------------------
HOSTED_TEST = "test_hosted.py::test_chapters_00_to_05_pass_nbval_on_the_default_python3_kernel"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Each chapter runs under nbval once per session, not twice.

    tests/package/test_hosted.py runs chapters 00–05 under nbval on a pip-installed copy of the
    package and the default ``python3`` kernel, comparing every stored output with the sanitizer
    used here. When that test is selected, the same chapters' nbval cells on the course's kernel
    are deselected: the two runs would compare the same outputs of the same code, and the course
    kernel differs only by its private network, which chapters 00–05 never use (they start no
    TensorFlow server). Chapters 06 on, which do, run on the course kernel. Run one chapter
    alone (``pytest notebooks/01_mirrored_variable.ipynb --nbval …``) and it runs on the course
    kernel as always."""
    test = next((item for item in items if item.nodeid.endswith(HOSTED_TEST)), None)
    if test is None:
        return
    hosted = {f"{name}.ipynb" for name in test.module.HOSTED_CHAPTERS}
    twice = [item for item in items
             if item.path.parent.name == "notebooks" and item.path.name in hosted]
    if twice:
        config.hook.pytest_deselected(items=twice)
        ids = {id(item) for item in twice}
        items[:] = [item for item in items if id(item) not in ids]


# ---- the end of the run ----------------------------------------------------------------------
def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


_EXIT_STATUS = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the test process as soon as pytest has reported, with pytest's own exit status.

    Many tests here leave TensorFlow runtimes behind on purpose (aborted collectives, in-process
    servers, which TF cannot stop). Once in a while TF's C++ teardown at interpreter exit then waits
    for one of those forever: seen once in a clean-clone CI run, after "2202 passed" was printed,
    with the main thread in a futex wait and TF's collective threads blocked. Every result has been
    reported by now, so the process ends here, without that teardown (``os._exit``)."""
    if _EXIT_STATUS not in config.stash:
        return  # collection only, or pytest failed before the session ran
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash[_EXIT_STATUS])
