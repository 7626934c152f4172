"""``python -m mirrortutor``: record any TensorFlow program, unchanged.

    python -m mirrortutor record [--out DIR] [--replicas N] [--record WHAT] train.py [ARGS…]
    python -m mirrortutor run    [--replicas N] train.py [ARGS…]

``record`` runs the program with mirrortutor's recording strategies in place of
``tf.distribute.MirroredStrategy``, ``MultiWorkerMirroredStrategy`` and ``ParameterServerStrategy``
(:mod:`mirrortutor.record.substitute`), writes one trace file per strategy it created (the
format of ``trace.save``, with the step timeline on), and says where the files are and what
``mt.diagnose`` makes of the recorded steps. ``run`` runs the same program on the same devices with
nothing replaced: stock TensorFlow, to compare with. On a machine without GPUs, ``--replicas N``
gives TensorFlow N logical CPU devices first, one replica each (what ``mt.setup(N)`` does in a
notebook, done before TensorFlow starts so that multi-worker programs can still configure their
collectives).

The program's standard output is its own, byte for byte; mirrortutor writes to standard error. The
exit status is the program's. This module only turns arguments into calls:
:func:`mirrortutor.record.program.run_program` does the work.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading

from .errors import MirrortutorError

__all__ = ["PRESETS", "main", "parser"]

PROG = "python -m mirrortutor"
#: What ``--record`` chooses: a name for each :class:`~mirrortutor.Recording` preset.
PRESETS = ("default", "everything", "first-step", "timing")


def parser() -> argparse.ArgumentParser:
    """The command line's parser: ``record`` and ``run``, each with the program and its args."""
    top = argparse.ArgumentParser(prog=PROG, description="See what tf.distribute does in any "
                                  "TensorFlow program, without changing the program.")
    commands = top.add_subparsers(dest="command", required=True, metavar="{record,run}")
    record = commands.add_parser(
        "record", help="run a program with its strategies recorded",
        description="Run SCRIPT with mirrortutor's recording strategies in place of "
        "tf.distribute's; write each strategy's trace (mt.Trace.load opens it) and diagnose it.")
    record.add_argument("--out", default="mirrortutor-traces",
                        help="folder for the trace files (default: %(default)s)")
    record.add_argument("--record", choices=PRESETS, default="default", dest="preset",
                        help="how much to record: the mt.Recording presets (default: the first "
                        "20 steps, then a bounded sample); the step timeline is always on")
    record.add_argument("--quiet", action="store_true", help="no progress line")
    run = commands.add_parser(
        "run", help="run a program on the same devices, with stock tf.distribute",
        description="Run SCRIPT on the devices --replicas gives, with nothing replaced: what "
        "the program does without mirrortutor, to compare with `record`.")
    for command in (record, run):
        command.add_argument("--replicas", type=int, metavar="N",
                             help="without GPUs: split the CPU into N logical devices first")
        command.add_argument("script", help="the Python program to run")
        command.add_argument("args", nargs=argparse.REMAINDER, help="the program's own arguments")
    return top


def _recording(preset: str):
    from .record.records import Recording

    chosen = {"default": Recording(), "everything": Recording.everything(),
              "first-step": Recording.first_step(), "timing": Recording.timing()}[preset]
    return dataclasses.replace(chosen, timeline=True)


def _devices(replicas: int | None) -> None:
    if replicas is None:
        return
    from .devices import MAX_CPU_REPLICAS, split_cpu_before_start
    from .errors import ReplicaCountError
    from .validate import is_whole

    if not is_whole(replicas) or not 1 <= replicas <= MAX_CPU_REPLICAS:
        raise ReplicaCountError(f"--replicas must be a whole number from 1 to {MAX_CPU_REPLICAS}, "
                                f"but got {replicas}: --replicas 4, for example.")
    if not split_cpu_before_start(replicas):
        print(f"mirrortutor: this machine has GPUs; the program uses them (--replicas "
              f"{replicas} only splits the CPU of a machine without GPUs).", file=sys.stderr)


class _StepsLine:
    """A progress line on standard error: steps run by the strategies the program created."""

    def __init__(self, strategies: list, enabled: bool):
        self.strategies, self.done = strategies, threading.Event()
        self.thread = threading.Thread(target=self._show, daemon=True) if enabled else None

    def _show(self) -> None:
        from tqdm import tqdm

        with tqdm(desc="recording", unit=" steps", file=sys.stderr, leave=False) as bar:
            while not self.done.wait(0.5):
                try:
                    bar.update(sum(s.trace.steps_run for s in list(self.strategies)) - bar.n)
                except Exception:  # a strategy half-made, or TF shutting down: show it next time
                    pass

    def __enter__(self):
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join()


def _report(run) -> None:
    """Where the traces went and what mt.diagnose says of them, on standard error."""
    say = lambda text="": print(text, file=sys.stderr)  # noqa: E731
    if not run.strategies:
        say(f"mirrortutor: {run.script} created no tf.distribute.MirroredStrategy, "
            "MultiWorkerMirroredStrategy or ParameterServerStrategy, so there was nothing to "
            "record. Record a program that creates one (its training runs under "
            "strategy.scope() and strategy.run, fit or a ClusterCoordinator).")
        return
    from .training.diagnose import diagnose

    for strategy, path in zip(run.strategies, run.files):
        trace = strategy.trace
        say(f"\nmirrortutor: {type(strategy).__name__} trace written to {path}")
        say("  " + trace.summary().replace("\n", "\n  "))
        say(f"  Open it in a notebook: trace = mt.Trace.load({str(path)!r})")
        try:
            say("  " + diagnose(trace).report().replace("\n", "\n  "))
        except MirrortutorError as exc:  # fewer than two timed steps: say why, no diagnosis
            say(f"  No diagnosis: {exc}")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (the program's own, for record and run)."""
    args = parser().parse_args(argv)
    try:
        from .record.program import check_program, run_program

        check_program(args.script, args.out if args.command == "record" else ".")
        _devices(args.replicas)
        if args.command == "run":
            run = run_program(args.script, args.args, out=None)
        else:
            strategies: list = []
            with _StepsLine(strategies, not args.quiet and sys.stderr.isatty()):
                run = run_program(args.script, args.args, out=args.out,
                                  recording=_recording(args.preset), created=strategies)
    except MirrortutorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if run.error_text:
        print(run.error_text, file=sys.stderr, end="")
    if args.command == "record":
        _report(run)
    return run.exit_code

