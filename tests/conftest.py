"""Shared set-up: give TensorFlow 8 logical CPU devices before any test touches it.

TensorFlow's devices are fixed once its runtime starts, so the whole pytest process works with the
same 8 devices; tests that need a fresh TensorFlow (e.g. "setup after TF started") run a child
process. Strategies over the first k of them stand in for 1, 2, 4 and 8 replicas.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import mirrortutor as mt

DEVICES = mt.setup(8, quiet=True)


@pytest.fixture(scope="session")
def devices() -> list[str]:
    """The 8 logical CPU device names, in replica order."""
    return DEVICES


def run_python(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python (a fresh TensorFlow), return its output."""
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)
