"""The teacher's command line: release the student versions, then grade what comes back.

    python -m mirrortutor.grading release exercises/ --out handout/
    python -m mirrortutor.grading grade submissions/03/ --key exercises/03_gradients_allreduce.ipynb

One :mod:`argparse` parser with a subcommand per step, so ``--help`` lists both and each has its
own (``python -m mirrortutor.grading grade --help``). The work is done by
:func:`mirrortutor.grading.release.release_folder` and :func:`mirrortutor.grading.grade.grade`;
this module only turns arguments into a call. A bad path or key (a :class:`MirrortutorError` or
an :class:`OSError`) prints ``error: ...`` and exits with code 2, argparse's code for bad usage,
without a traceback.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import MirrortutorError
from .grade import grade
from .release import release_folder

__all__ = ["main", "parser"]

PROG = "python -m mirrortutor.grading"


def parser() -> argparse.ArgumentParser:
    """The command line's parser: ``release`` and ``grade``, one of them required."""
    top = argparse.ArgumentParser(prog=PROG, description="Release exercise notebooks to students, "
                                  "and grade their submissions with nbval.")
    steps = top.add_subparsers(dest="command", required=True, metavar="{release,grade}")

    release = steps.add_parser("release", help="make student versions of instructor notebooks",
                               description="Make student versions of instructor notebooks: "
                               "solutions replaced by TODOs, outputs cleared, cell ids kept.")
    release.add_argument("source", help="an instructor notebook, or a folder of them")
    release.add_argument("--out", required=True, help="folder for the student versions")

    marking = steps.add_parser("grade", help="grade submissions against an instructor notebook",
                               description="Grade exercise submissions with nbval.")
    marking.add_argument("submissions", help="a folder of submitted notebooks (or one notebook)")
    marking.add_argument("--key", required=True, help="the instructor notebook, with its outputs")
    marking.add_argument("--out", default="grades",
                         help="folder for grades.csv, details.csv, summary.txt and feedback/ "
                         "(default grades)")
    marking.add_argument("--cell-timeout", type=float, default=60,
                         help="seconds per cell (default 60)")
    marking.add_argument("--timeout", type=float, default=600,
                         help="seconds per submission (default 600)")
    marking.add_argument("--jobs", type=int, default=1,
                         help="submissions graded at once (default 1)")
    marking.add_argument("--keep", help="keep each graded notebook and pytest log in this folder")
    marking.add_argument("--trust-submissions", action="store_true",
                         help="where no sandbox can be made, run the submissions as yourself, "
                         "able to read the key and change the grades (the reports say so)")
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = parser().parse_args(argv)
    try:
        if args.command == "release":
            for path in release_folder(args.source, args.out):
                print(f"wrote {path}")
            return 0
        book = grade(args.submissions, args.key, out=args.out, cell_timeout=args.cell_timeout,
                     timeout=args.timeout, jobs=args.jobs, keep=args.keep,
                     trust_submissions=args.trust_submissions)
    except (MirrortutorError, OSError) as exc:  # a bad key or path: say so, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(book.summary(), end="")
    print(f"Wrote {args.out}/grades.csv, details.csv, summary.txt and feedback/<student>.md.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
