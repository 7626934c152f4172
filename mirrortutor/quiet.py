"""Keep TensorFlow's start-up chatter out of a student's first cell, and nothing else.

Importing TensorFlow and listing its devices print C++ log lines straight to the process's stderr
("oneDNN custom operations are on", "Could not find cuda drivers", "failed call to cuInit" on a
machine without a GPU...). They come before TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL``, so that
setting cannot hide them. :func:`native_startup_filtered` catches the native stderr for the length
of a block, drops exactly those known start-up lines, and writes every other line back, so a real
error still shows.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager

#: Start-up lines that say nothing about the course's computations.
STARTUP_NOISE = [re.compile(p) for p in (
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    r"^I0000 .*\] oneDNN custom operations are on",
    r"^I0000 .*\] Could not find cuda drivers on your machine",
    r"^E0000 .*\] failed call to cuInit",
    r"^I0000 .*cpu_feature_guard.*\] This TensorFlow binary is optimized",
    r"^To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler",
)]


@contextmanager
def native_startup_filtered():
    """Within the block, drop TensorFlow's known start-up lines from the native stderr (fd 2)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (some embedded interpreters): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().decode(errors="replace").splitlines()
            kept = [line for line in lines if not any(p.search(line) for p in STARTUP_NOISE)]
            if kept:
                os.write(2, ("\n".join(kept) + "\n").encode())
