"""Chapter 09 · Is it using my GPUs effectively? Bottlenecks reasoned out, then seen in a timeline.

The rules taught: a pipeline that reads ahead (``experimental_distribute_dataset`` keeps a batch
per device, ``prefetch`` more) overlaps reading with compute, so a step takes the *longer* of the
two, not their sum; ``num_parallel_calls`` divides the reading time by the reads in flight, and
``cache()`` removes it after the first pass (q9.1). In a synchronous step every replica waits for
the slowest, so one replica slowed by ``d`` makes each of the others wait about ``d`` while it waits
for nobody: ``(N − 1) / N × d`` per replica on average (q9.2), which ``mt.diagnose`` then names
from a real run (q9.3: the student writes the custom training step, ``strategy.run`` inside
``tf.function`` with the one ``mt.straggle`` line, runs it, and hands in the measured diagnosis; its
judge checks that the steps ran in ``tf.function``, the cause, and that the waiting is of the
predicted size, with margins wide enough for a busy machine).
"""

from __future__ import annotations

from ..checks import Function, Wrong, close, fmt, judge_number, number, question, short

# q9.1: (read_s per batch, compute_s per step, parallel_reads, cached)
PIPELINES = ((0.1, 0.02, 1, False), (0.1, 0.02, 4, False), (0.1, 0.02, 8, False),
             (0.1, 0.02, 1, True))


def pipeline_step_seconds(read_s, compute_s, parallel_reads, cached) -> float:
    """Seconds per step once the pipeline runs ahead: the longer of compute and one batch's read
    (spread over the parallel reads); a cached pipeline reads nothing after its first pass."""
    return compute_s if cached else max(compute_s, read_s / parallel_reads)


@question("q9.1", "09_is_it_effective",
          "write step_seconds(read_s, compute_s, parallel_reads, cached): seconds per step once "
          "the pipeline reads ahead",
          right="your step_seconds(…) takes the longer of the compute and one batch's read divided "
                "by the parallel reads (reading overlaps with compute), and only the compute once "
                "the data is cached.",
          kind=Function("step_seconds", PIPELINES))
def _q9_1(calls):
    for case, result in calls:
        read_s, compute_s, parallel, cached = case
        got = number(result, calls.shown(case))
        want = pipeline_step_seconds(*case)
        if close(got, want):
            continue
        said = f"{calls.shown(case)} gave {fmt(got)}; expected {fmt(want)}."
        if not cached and close(got, compute_s + read_s / parallel):
            return (f"{said} You added reading and computing, but the pipeline reads the next batch "
                    "while the replicas compute (experimental_distribute_dataset keeps one per "
                    "device): a step takes the longer of the two.")
        if not cached and close(got, max(compute_s, read_s)):
            return (f"{said} {parallel} reads in flight deliver a batch every read_s / "
                    f"{parallel} seconds: divide the read time by parallel_reads.")
        if cached and not close(got, compute_s):
            return (f"{said} After cache()'s first pass nothing is read again: the step is the "
                    "compute alone.")
        return f"{said} Take the longer of compute_s and read_s / parallel_reads (cached: compute_s)."
    return None


REPLICAS, DELAY_MS = 4, 50.0  # q9.2 and q9.3: 4 replicas, one slowed by 50 ms per step


def mean_wait_ms() -> float:
    """Average over the replicas of the time each waits for the others per step: the N − 1 fast
    ones wait the delay, the slowed one waits for nobody."""
    return (REPLICAS - 1) / REPLICAS * DELAY_MS


@question("q9.2", "09b_communication_and_stragglers",
          "predict the milliseconds per step an average replica waits for the others, 4 replicas "
          "with replica 1 slowed by 50 ms",
          right=f"{mean_wait_ms():g} ms: the 3 other replicas each wait about 50 ms, replica 1 "
                "waits for nobody; (N − 1) / N × 50 ms on average.")
def _q9_2(answer):
    return judge_number(
        answer, "predicted_wait_ms", mean_wait_ms(),
        hints={DELAY_MS: "50 ms is what each of the OTHER replicas waits; the slowed replica "
                         "itself waits for nobody, and the average is over all 4.",
               DELAY_MS / REPLICAS: "12.5 ms would be one replica waiting 50 ms; here three of "
                                    "the four wait for the slowed one.",
               0.0: "a synchronous step cannot finish before the slowest replica's gradient: "
                    "the others do wait."},
        fallback="Count who waits: every replica but the slowed one waits its 50 ms, then "
                 "average over the 4 replicas.")


WAIT_RANGE = (0.5, 3.0)  # q9.3: measured waiting / predicted, accepted (a busy machine adds time)


@question("q9.3", "09b_communication_and_stragglers",
          "write a custom training step (strategy.run inside tf.function) on 4 replicas whose "
          "replica 1 holds its gradients 50 ms (mt.straggle), run it, and hand in "
          "mt.diagnose(strategy)",
          right="your diagnosis names stragglers, with the replicas waiting about (N − 1) / N × "
                "50 ms per step, as predicted (the measured time varies with the machine).")
def _q9_3(answer):
    if not isinstance(answer, dict) or answer.get("type") != "Diagnosis":
        raise Wrong(f"hand in what mt.diagnose(strategy) returns (a Diagnosis); got {short(answer)}.")
    if answer.get("replicas") != REPLICAS:
        return (f"the diagnosis is of {answer.get('replicas')} replicas; run your step on the "
                f"strategy of devices[:{REPLICAS}] given in the cell.")
    if answer.get("eager") is not False:
        return ("the diagnosed steps ran eagerly: strategy.run was called outside tf.function, so "
                "eager execution, not the straggler, sets the step. Put @tf.function on the "
                "function that calls strategy.run, as in chapter 03's loop.")
    waiting = number(answer.get("waiting_s"), "the diagnosis's waiting_s") * 1e3
    low, high = (r * mean_wait_ms() for r in WAIT_RANGE)
    if answer.get("cause") != "stragglers" or not low <= waiting <= high:
        return (f"the diagnosis names {answer.get('cause')!r} with {waiting:.1f} ms of waiting per "
                f"step; with replica 1 holding its gradients 50 ms (grads = mt.straggle(grads, "
                f"0.05, replica=1) in the function strategy.run runs, before apply_gradients) the "
                f"others wait about {mean_wait_ms():g} ms on average and the cause is "
                "'stragglers'. Check the straggler line, that the step ran at least 6 times after "
                "its first, and that the strategy records a timeline (mt.Recording.timing()).")
    return None
