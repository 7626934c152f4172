"""Chapter 09 · Is it using my GPUs effectively? Bottlenecks reasoned out, then seen in a timeline.

The rules taught: a pipeline that reads ahead (``experimental_distribute_dataset`` keeps a batch
per device, ``prefetch`` more) overlaps reading with compute, so a step takes the *longer* of the
two, not their sum; ``num_parallel_calls`` divides the reading time by the reads in flight, and
``cache()`` removes it after the first pass (q9.1). In a synchronous step every replica waits
from handing its gradient to the all-reduce until the last replica's arrives: with replica 1
holding its gradients 50 ms and replica 3 20 ms, and in a model where a hold of d ms delays the
hand-over exactly d ms, replicas 0 and 2 wait 50 ms, replica 3 30 ms and replica 1 nothing (q9.2).
q9.3: the student writes the custom training step (``strategy.run`` inside ``tf.function`` with
the two ``mt.straggle`` lines), runs it, and hands in the strategy; the check reads its timeline
(``mt.diagnose``'s cause, each replica's waiting) and the judge checks the model's pattern, with
margins wide enough for a busy machine and for what the model leaves out (a hold costs more than
its delay).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..answers import Value
from ..checks import Function, Wrong, close, fmt, hint_for, number, numbers, question, short

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


REPLICAS = 4  # q9.2 and q9.3: 4 replicas
HOLDS_MS = {1: 50.0, 3: 20.0}  # replica -> how long it holds its gradients (mt.straggle), in ms
STEPS = 6  # q9.3: the last steps of the student's 8 read (the first one traces)


def model_waits_ms() -> list[float]:
    """Each replica's waiting per step in the model q9.2 states (equal compute, a hold of d ms makes
    the hand-over exactly d ms later): from its own hand-over until the last one, the longest
    hold's: [50, 0, 50, 30]."""
    last = max(HOLDS_MS.values())
    return [last - HOLDS_MS.get(r, 0.0) for r in range(REPLICAS)]


def _listed(values: list[float]) -> str:
    return "[" + ", ".join(fmt(v) for v in values) + "]"


@question("q9.2", "09b_communication_and_stragglers",
          "predict each replica's waiting, ms per step, replica 0 first: 4 replicas, replica 1 "
          "holds its gradients 50 ms and replica 3 holds its gradients 20 ms",
          right=f"{_listed(model_waits_ms())} ms: replica 1's gradient is handed over last, 50 ms "
                "after the others' were computed, and each replica waits from its own hand-over "
                "until then: 50 ms for replicas 0 and 2, 50 − 20 = 30 ms for replica 3, nothing "
                "for replica 1.")
def _q9_2(answer):
    got = numbers(answer, "predicted_wait_ms")
    want = model_waits_ms()
    if len(got) != REPLICAS:
        return (f"predicted_wait_ms should hold one number per replica ({REPLICAS}), replica 0 "
                f"first; got {short(answer)}.")
    if all(close(a, b) for a, b in zip(got, want)):
        return None
    said = f"you predicted {_listed(got)} ms. "
    holds = [HOLDS_MS.get(r, 0.0) for r in range(REPLICAS)]
    if all(close(a, b) for a, b in zip(got, holds)):
        return said + ("Those are the holds. A replica holding its gradients has not handed them "
                       "over yet; its waiting starts at the hand-over and lasts until the last "
                       "gradient (replica 1's) has arrived.")
    if not close(got[1], 0.0):
        return said + ("Replica 1's gradient is the last to arrive: once it hands it over the "
                       "all-reduce can finish, so replica 1 waits for nobody.")
    if any(close(v, sum(HOLDS_MS.values())) for v in got):
        return said + ("The two holds run at the same time, on different replicas: the last "
                       "gradient arrives 50 ms late, not 50 + 20.")
    if not (close(got[0], want[0]) and close(got[2], want[2])):
        return said + ("Replicas 0 and 2 hold nothing: they hand over their gradients at once and "
                       "wait the whole 50 ms for replica 1's.")
    hints = {50.0: "Replica 3 waits for replica 1 too, but its own 20 ms hold has used part of "
                   "that time: it hands over 20 ms late and waits the remaining 50 − 20 ms.",
             0.0: "Replica 3 is slow, but not the slowest: it hands over its gradient 20 ms after "
                  "replicas 0 and 2, still 30 ms before replica 1.",
             20.0: "20 ms is replica 3's hold, not its waiting: while it holds its gradients it "
                   "is not waiting yet; it waits from its hand-over until replica 1's gradient "
                   "arrives."}
    return said + hint_for(got[3], hints, "Replica 3 hands over 20 ms late; replica 1's gradient "
                                          "arrives 50 ms late. How long does replica 3 wait?")


@dataclass(frozen=True)
class StragglerRun(Value):
    """q9.3's answer, the strategy the student's loop ran on, handed over as what its timeline
    shows of its last STEPS steps: mt.diagnose's verdict and each replica's waiting (read in the
    student's kernel; the judge never sees TensorFlow)."""

    def export(self, strategy, hidden: list) -> dict:
        trace = getattr(strategy, "trace", None)
        if not hasattr(trace, "timed_steps"):
            return {"type": type(strategy).__name__}
        from ...training.diagnose import diagnose

        try:
            found = diagnose(strategy, steps=STEPS)
            steps = trace.timed_steps()[-STEPS:]
            timeline = trace.timeline(steps)
        except Exception as exc:  # no timeline, too few steps: said to the student, not raised
            return {"type": "StragglerRun", "error": f"{type(exc).__name__}: {exc}"}
        waiting = [sum(p.seconds for p in timeline.phases
                       if p.replica == r and p.kind == "waiting for replicas") / len(steps)
                   for r in range(timeline.replicas)]
        return {"type": "StragglerRun", "steps": [int(s) for s in steps],
                "replicas": found.replicas, "eager": found.eager, "cause": found.cause,
                "waiting_ms": [round(w * 1e3, 3) for w in waiting]}


# q9.3: what the measured waiting may be, a loaded 2-core machine included. A hold costs more than
# its delay (mt.straggle's sleep is built and read in the step, ~10 ms more), so the replicas that
# wait for replica 1 wait more than the model's 50 ms; the others' compute skews every number.
FAST_RANGE = (0.6, 3.0)  # replicas 0 and 2: times the model's 50 ms
SLOWEST_MAX = 0.3  # replica 1: at most this times 50 ms
SECOND_MIN, GAP_MIN = 0.4, 0.5  # replica 3: at least 0.4 × 30 ms, and at least 0.5 × its 20 ms
#                                 hold less than replicas 0 and 2


@question("q9.3", "09b_communication_and_stragglers",
          "write a custom training step (strategy.run inside tf.function) on 4 replicas whose "
          "replica 1 holds its gradients 50 ms and replica 3 20 ms (mt.straggle), run 8 steps, "
          "and hand in the strategy",
          right="in your run replicas 0 and 2 wait for replica 1's 50 ms hold, replica 3 waits "
                "clearly less (its own 20 ms hold used part of that time), replica 1 waits for "
                "nobody, and mt.diagnose names stragglers: the model's pattern (the measured "
                "times vary with the machine).",
          kind=StragglerRun())
def _q9_3(answer):
    if not isinstance(answer, dict) or answer.get("type") != "StragglerRun":
        got = answer.get("type") if isinstance(answer, dict) else short(answer)
        raise Wrong(f"hand in the strategy your loop ran on, mt.check(\"q9.3\", strategy); got "
                    f"{got}.")
    if "error" in answer:
        return (f"the check could not read your strategy's timeline: {short(answer['error'], 300)} "
                f"Run the 8 steps of your loop on the strategy given in the cell.")
    if answer.get("replicas") != REPLICAS:
        return (f"the timeline is of {answer.get('replicas')} replicas; run your step on the "
                f"strategy of devices[:{REPLICAS}] given in the cell.")
    steps = answer.get("steps")
    if not isinstance(steps, list) or len(steps) != STEPS or 0 in steps:
        return (f"the check reads the last {STEPS} steps of your loop, without its first (which "
                f"traces the function), but your strategy recorded steps {short(steps)}: run "
                f"the loop for 8 steps.")
    if answer.get("eager") is not False:
        return ("the steps ran eagerly: strategy.run was called outside tf.function, so eager "
                "execution, not the stragglers, sets the step. Put @tf.function on the function "
                "that calls strategy.run, as in chapter 03's loop.")
    waits = numbers(answer.get("waiting_ms"), "each replica's waiting")
    if len(waits) != REPLICAS:
        raise Wrong(f"the timeline gave {len(waits)} replicas' waiting; expected {REPLICAS}.")
    shown = f"Your replicas waited {_listed([round(w, 1) for w in waits])} ms per step"
    delay, second = HOLDS_MS[1], HOLDS_MS[3]
    lines = ("grads = mt.straggle(grads, 0.05, replica=1) and grads = mt.straggle(grads, 0.02, "
             "replica=3), in the function strategy.run runs, before apply_gradients")
    low, high = (r * delay for r in FAST_RANGE)
    if not all(low <= waits[r] <= high for r in (0, 2)):
        return (f"{shown}: replicas 0 and 2 should wait about {fmt(delay)} ms (more on a busy "
                f"machine) for replica 1's hold. Check the two lines, {lines}.")
    if waits[1] > SLOWEST_MAX * delay:
        return (f"{shown}: replica 1 should be the last to hand over its gradient and wait for "
                f"nobody. Is another replica held as long as it, or longer? Check {lines}.")
    if waits[3] < SECOND_MIN * (delay - second):
        return (f"{shown}: replica 3 waited hardly at all, as if it were held as long as replica "
                f"1. Its hold is 20 ms: grads = mt.straggle(grads, 0.02, replica=3).")
    if waits[3] > min(waits[0], waits[2]) - GAP_MIN * second:
        return (f"{shown}: replica 3 waited as long as replicas 0 and 2, so its 20 ms hold did "
                f"not happen. Add grads = mt.straggle(grads, 0.02, replica=3) before "
                f"apply_gradients, in the function strategy.run runs.")
    if answer.get("cause") != "stragglers":
        return (f"{shown}, but mt.diagnose names {answer.get('cause')!r}, not 'stragglers': the "
                "waiting is too small a share of the step. Check the two lines, " + lines + ".")
    return None
