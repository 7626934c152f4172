"""What sealing costs: grading a class of 5 submissions sealed (the default) and unsealed.

    python benchmarks/grading_sandbox.py [EXERCISE] [--rounds N]

Grades the same five submissions of an exercise (default 03: the key, its realistic slip and
three fakes, as tests/grading does) both ways, one submission after another, alternating the
order each round, and prints each run's seconds and the ratio of the medians. Unsealed is what
grading did before the sandbox (each submission in the course's kernel, as the teacher): this
script makes it run by telling the grader no sandbox can be made, with --trust-submissions.
Issue 26 asks for sealed / unsealed <= 1.2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "grading")]

import nbformat  # noqa: E402

from exercise_keys import KEYS, key  # noqa: E402
from mirrortutor.grading import grade, sandbox  # noqa: E402
from submissions import FORGERIES, faked  # noqa: E402
from test_grade import MISTAKES  # noqa: E402


def class_of_five(ex: str, folder: Path) -> Path:
    """The key, its slip and the three fakes, written as five submissions."""
    student, _, _, slip = MISTAKES[ex]
    subs = {"solution": key(ex), student: slip(), **{how: faked(ex, how) for how in FORGERIES}}
    folder.mkdir()
    for name, nb in subs.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


def timed(folder: Path, ex: str, sealed: bool) -> float:
    """Seconds to grade ``folder``; unsealed by making the probe say no, with trust given."""
    real = sandbox.probe
    if not sealed:
        sandbox.probe = lambda: "the benchmark measures the unsealed run"
    try:
        start = time.perf_counter()
        book = grade.grade(folder, KEYS[ex], cell_timeout=120, timeout=600,
                           trust_submissions=not sealed)
        seconds = time.perf_counter() - start
    finally:
        sandbox.probe = real
    assert book.sealed == sealed and book.total("solution") == book.max_total, book.summary()
    return seconds


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("exercise", nargs="?", default="03")
    args.add_argument("--rounds", type=int, default=2)
    opts = args.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="mt-bench-") as tmp:
        folder = class_of_five(opts.exercise, Path(tmp) / "submissions")
        for r in range(opts.rounds):
            for sealed in ((True, False) if r % 2 else (False, True)):
                times[sealed].append(timed(folder, opts.exercise, sealed))
                print(f"round {r + 1}: {'sealed' if sealed else 'unsealed'} "
                      f"{times[sealed][-1]:.1f} s", flush=True)
    sealed, unsealed = statistics.median(times[True]), statistics.median(times[False])
    print(f"exercise {opts.exercise}, 5 submissions: unsealed {unsealed:.1f} s, sealed "
          f"{sealed:.1f} s (medians of {opts.rounds}); sealed / unsealed = {sealed / unsealed:.2f}")


if __name__ == "__main__":
    main()
