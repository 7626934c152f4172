"""``mt.diagnose``: is it using my devices effectively? Which of four causes holds a step back.

The seed question of chapter 09 has four usual answers, and each leaves a trace in the step
timeline (``mt.Recording(timeline=True)``, :mod:`mirrortutor.record.timeline`):

- **input**: the replicas wait for their batch (a slow ``tf.data`` pipeline): the *input* phase;
- **communication**: the all-reduce of the gradients: the *all-reduce* phase, from the moment the
  slowest replica's gradient is ready until the sum reaches a replica;
- **stragglers / unequal devices**: replicas idle until the slowest one catches up: the
  *waiting for replicas* phase;
- **eager execution**: ``strategy.run`` called without ``tf.function`` (TensorFlow logs "Using
  MirroredStrategy eagerly has significant overhead currently"): the same step is timed again
  inside ``tf.function`` and the difference is its cost. It is no phase of its own: it lies
  inside the other phases (mostly *compute*), so the shares add up to more than 100 %.

:func:`diagnose` reads those phases over a few steps and names the cause that costs the most time
per step, with the numbers, or none when no cause takes :data:`DOMINANT` of the step. Every number
is a mean per step over the steps diagnosed, on one clock, the timeline's stamps: a step's time is
its span (:meth:`~mirrortutor.record.timeline.Timeline.step_seconds`), the eager and the
``tf.function`` step alike, so the report's numbers add up. On logical CPU devices the numbers say
where time goes on this machine, not on GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DiagnosisError, NotRecordedError
from ..progress import progress
from ..record.trace import Trace
from ..timing import measured_here
from ..validate import whole_number

__all__ = ["CAUSES", "DOMINANT", "Diagnosis", "diagnose"]

#: The four causes: what each looks like, and what to try.
CAUSES = {
    "input": ("the replicas wait for their batches",
              "parallelise the slow map (num_parallel_calls=tf.data.AUTOTUNE), cache() what does "
              "not change between epochs, prefetch(tf.data.AUTOTUNE)"),
    "communication": ("the gradient all-reduce takes the time",
                      "a larger per-replica batch (more compute per byte sent), fewer all-reduces "
                      "(gradient accumulation), a faster interconnect, or bucketing to overlap "
                      "it with the backward pass where the all-reduce takes CommunicationOptions "
                      "(MultiWorkerMirroredStrategy's communication_options, your own "
                      "all_reduce(..., options=...))"),
    "stragglers": ("replicas wait for the slowest one",
                   "find the slow device (or the replica with more work), balance the shards, or "
                   "leave the slow device out"),
    "eager": ("strategy.run runs eagerly, replica by replica in Python threads",
              "wrap the step in tf.function"),
}
DOMINANT = 0.25  # a cause "dominates" when it costs at least this share of the step


@dataclass
class Diagnosis:
    """Where a few steps' time went: seconds per step, each the mean over the steps (and the
    replicas) of the timeline's stamps, one clock for every number."""

    steps: int  # steps diagnosed
    replicas: int  # num_replicas_in_sync
    step_s: float  # the mean of the steps' spans (launch to the next launch) on the timeline
    input_s: float  # waiting for the batch
    compute_s: float  # computing
    waiting_s: float  # waiting for the slowest replica
    allreduce_s: float  # all-reducing, once every replica's input was ready
    outside_s: float  # outside strategy.run: the host's own work between steps
    eager: bool  # the steps ran eagerly
    eager_s: float | None  # step_s - graph_step_s: what running eagerly cost (None: not measured)
    graph_step_s: float | None  # the same step in tf.function: the mean of its steps' spans
    where: str  # what the times were measured on
    cause: str | None = None  # "input", "communication", "stragglers", "eager", or None

    def costs(self) -> dict[str, float]:
        """Seconds per step each cause costs (eager: 0 when not measured or not eager)."""
        return {"input": self.input_s, "communication": self.allreduce_s,
                "stragglers": self.waiting_s, "eager": self.eager_s or 0.0}

    def report(self) -> str:
        """The diagnosis in plain words, with the numbers."""
        ms = lambda s: f"{s * 1e3:7.2f} ms"  # noqa: E731
        share = lambda s: f"{s / self.step_s:4.0%}" if self.step_s > 0 else "   -"  # noqa: E731
        lines = [f"{self.steps} steps on {self.replicas} replicas, {ms(self.step_s).strip()} per "
                 f"step ({self.where}).",
                 "Each time is a mean per step over these steps, from the timeline's stamps (one "
                 "clock).", ""]
        names = {"input": "input", "communication": "communication (all-reduce)",
                 "stragglers": "stragglers (waiting)", "eager": "eager execution"}
        for key, seconds in self.costs().items():
            note = ""
            if key == "eager":
                if not self.eager:
                    note = "  (the steps ran inside tf.function)"
                elif self.eager_s is None:
                    note = "  (the steps ran eagerly; pass step= to measure the cost)"
                else:
                    note = (f"  (= {ms(self.step_s).strip()} eagerly - "
                            f"{ms(self.graph_step_s).strip()} in tf.function)")
            mark = "  <- dominates" if key == self.cause else ""
            lines.append(f"  {names[key]:28s} {ms(seconds)} {share(seconds)}{mark}{note}")
        lines.append(f"  {'(computing':28s} {ms(self.compute_s)} {share(self.compute_s)})")
        lines.append(f"  {'(outside strategy.run':28s} {ms(self.outside_s)} "
                     f"{share(self.outside_s)})")
        lines.append("")
        if self.cause is None:
            lines.append(f"No cause takes {DOMINANT:.0%} of the step: "
                         + ("the replicas mostly compute." if self.compute_s >= max(
                             self.outside_s, *self.costs().values()) else
                            "the largest part is outside strategy.run (the host's own work "
                            "between steps: the Python loop, dispatching the step)."))
        else:
            what, remedy = CAUSES[self.cause]
            lines.append(f"Dominant cause: {self.cause}: {what}. Try: {remedy}.")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


def verdict(d: Diagnosis) -> str | None:
    """The cause that costs the most time per step, if it takes at least DOMINANT of it."""
    if d.eager and d.eager_s is None:
        return "eager"  # TensorFlow's own warning: unmeasured, but never small
    costs = d.costs()
    worst = max(costs, key=costs.get)
    return worst if d.step_s > 0 and costs[worst] >= DOMINANT * d.step_s else None


def _diagnosis(timeline, graph=None) -> Diagnosis:
    """The diagnosis of ``timeline``'s steps; ``graph``: the timeline of the same step run in
    tf.function, when the steps ran eagerly. Both step times are means of spans on one clock."""
    step_s = float(np.mean(timeline.step_seconds()))
    graph_s = None if graph is None else float(np.mean(graph.step_seconds()))
    eager_s = None if graph_s is None else max(0.0, step_s - graph_s)
    kind = "GPU" if any("GPU" in d.upper() for d in timeline.devices) else "CPU"
    t = timeline.totals()
    d = Diagnosis(len(timeline.steps), timeline.replicas, step_s, t["input"],
                  t["compute"], t["waiting for replicas"], t["all-reduce"], t["outside run"],
                  all(timeline.eager), eager_s, graph_s, measured_here(kind))
    d.cause = verdict(d)
    return d


def _timeline(trace, steps: list[int]):
    """The timeline of ``steps``, or a plain error when fewer than two of them were recorded."""
    recorded = set(trace.timed_steps())
    timed = [s for s in steps if s in recorded]
    if len(timed) < 2:
        raise NotRecordedError(
            f"Only {len(timed)} of the {len(steps)} steps to diagnose have a timeline: the "
            f"strategy records {trace.recording.describe()}. Diagnose with a strategy created "
            "with recording=mt.Recording(timeline=True, first_steps=1000) (or soon after "
            "creating it, within its first steps).")
    return trace.timeline(timed)


def _run(trace, step, count: int, bar) -> list[int]:
    """Call ``step`` ``count`` times; the numbers of the steps the strategy counted meanwhile."""
    first = trace.steps_run
    for _ in range(count):
        step()
        bar.update(1)
    return list(range(first, trace.steps_run))


def diagnose(strategy, step=None, *, steps: int = 10, warmup: int = 2) -> Diagnosis:
    """Which of four causes (input, communication, stragglers, eager) holds the steps back.

    ``strategy``: an ``mt.MirroredStrategy`` created with ``recording=mt.Recording(timeline=True)``,
    or a :class:`~mirrortutor.Trace` recorded that way (then its last ``steps`` recorded steps are
    read, and ``step`` cannot be given).
    ``step``: a function of no arguments that runs one training step (one ``strategy.run``),
    e.g. ``lambda: train_step(next(iterator))``; it is run ``warmup`` times (tracing), then
    ``steps`` times, which trains the model that much further. If the steps ran eagerly, the same
    ``step`` is then run in ``tf.function`` (as many times) to measure what eager execution costs:
    the difference of the two mean step times on the timeline. Without
    ``step``, the last ``steps`` recorded steps are read instead: what the student's own loop
    already ran on that strategy (chapter 09's straggler: a custom loop with ``mt.straggle`` in its
    replica step), or a trace ``python -m mirrortutor record`` wrote. Returns a
    :class:`Diagnosis`; print it for the verdict in words.
    """
    trace = strategy if isinstance(strategy, Trace) else getattr(strategy, "trace", None)
    if not isinstance(trace, Trace) or (step is not None and not hasattr(strategy, "run")):
        raise DiagnosisError(
            f"mt.diagnose needs the strategy that runs the steps, an mt.MirroredStrategy created "
            f"with recording=mt.Recording(timeline=True), or a trace of steps already recorded "
            f"that way (mt.Trace.load of a file `python -m mirrortutor record` wrote); got "
            f"{type(strategy).__name__}.")
    if not trace.recording.timeline:
        raise NotRecordedError(
            "This strategy does not record a timeline. Create it with "
            "recording=mt.Recording(timeline=True) (and build the model in its scope again).")
    whole_number(steps, DiagnosisError, f"steps must be a whole number >= 2, got {steps!r}: "
                 "a diagnosis compares a few steps.", low=2)
    whole_number(warmup, DiagnosisError, f"warmup must be a whole number >= 0, got {warmup!r}.",
                 low=0)
    if step is None:
        return _diagnosis(_timeline(trace, trace.timed_steps()[-steps:]))
    if not callable(step):
        raise DiagnosisError(
            f"step must be a function of no arguments that runs one training step, e.g. "
            f"lambda: train_step(next(iterator)); got {type(step).__name__}.")
    with progress(warmup + steps, "diagnosing: running steps") as bar:
        _run(trace, step, warmup, bar)
        timeline = _timeline(trace, _run(trace, step, steps, bar))
    if not all(timeline.eager):
        return _diagnosis(timeline)
    import tensorflow as tf

    try:
        in_graph = tf.function(step)
        with progress(warmup + 1 + steps, "diagnosing: the same step in tf.function") as bar:
            _run(trace, in_graph, warmup + 1, bar)  # + 1: the first call traces
            graph = _timeline(trace, _run(trace, in_graph, steps, bar))
    except Exception:  # a step tf.function cannot trace (e.g. .numpy() inside), or steps the
        return _diagnosis(timeline)  # strategy no longer records (NotRecordedError): not measured
    return _diagnosis(timeline, graph)
