"""Chapter 07 · Stale gradients: staleness counted by hand from a parameter server's update log.

No cluster runs here: staleness is arithmetic on an update log (which update read which version,
which version it was applied to), so these questions are plain numpy and reasoning, and their
checks are exact. The rules are chapter 07's: staleness = version applied − version read; with N
workers the mean is at most N − 1, and, for busy workers, about (N − 1) × the share of time a
worker holds a gradient in flight, reached only once the first updates are past (q7.2 predicts a
histogram's mean, warm-up included). q7.3 is a trade-off: with a straggler, synchronous steps
wait for it, asynchronous ones keep going but grow stale, and dropping the straggler is a third
way; the student prices each in examples per second and chooses under a staleness limit.

q7.4 asks for TensorFlow: the step a ``ClusterCoordinator`` schedules, with a straggler, and the
``schedule``/``join`` loop, run on a real cluster. The judge reads what the run left, the recording
strategy's log and the fetched losses, and checks what holds on every run however the workers were
scheduled: every step ran once, the loss went down, the straggler ran at most half as many steps
as either other worker and its counted staleness was the highest. The log cannot tell where in the
step the wait was (the version counter is read first and incremented last, so a wait anywhere in
between counts the same): the judge checks that worker 1 was slow, not the wait's placement.
"""

from __future__ import annotations

import math

from ..checks import Function, Wrong, close, disagreements, judge_number, numbers, question, short

# (read times, apply times) of every update, in the order the ps applied them.
TIMELINES = (
    ([0.0, 1.0, 2.0, 3.5, 4.5, 5.5], [3.0, 4.0, 5.0, 6.5, 7.5, 8.5]),  # 3 workers, always busy
    ([0.0, 0.0, 1.5, 2.5, 0.0, 3.5], [1.0, 2.0, 3.0, 4.0, 4.5, 5.0]),  # update 4: a straggler
    ([0.0], [1.0]),                                                     # one worker, one update
)


def staleness_of(reads, applies) -> list[int]:
    """How many other updates landed between each update's read and its own apply."""
    return [sum(1 for j, t in enumerate(applies) if j != i and reads[i] < t < applies[i])
            for i in range(len(applies))]


@question("q7.1", "07_stale_gradients",
          "write staleness(reads, applies): per update, the updates applied between its read "
          "and apply",
          right="your staleness(…) counts, for every update, the others applied between its read and "
                "its own apply: version applied − version read, straggler included.",
          kind=Function("staleness", TIMELINES))
def _q7_1(calls):
    for (reads, applies), got, want in disagreements(calls, staleness_of):
        if len(got) != len(want):
            return f"for {len(applies)} updates staleness returned {len(got)} values; give one per update."
        if got == [w + 1 for w in want]:
            return (f"for reads {reads} and applies {applies} you gave {got}, the right counts plus 1 "
                    "each: an update does not make itself stale, count only the others.")
        if got == list(range(len(applies))):
            return (f"you gave {got}: every update applied before it (its applied version). Subtract "
                    "the version it read: only updates that landed after its read count.")
        return (f"for reads {reads} and applies {applies} you gave {got}; expected {want}. Count the "
                "updates j whose apply time falls strictly between update i's read and apply times.")
    return None


# q7.2: 3 workers, 3 s per gradient, started 1 s apart: 9 updates, the first ones less stale.
LOG = ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0])


@question("q7.2", "07_stale_gradients",
          "predict the mean of the staleness histogram of a 9-update log from 3 busy workers",
          right="5/3 ≈ 1.667: staleness 0, 1, then 2 for the other 7 updates. The steady state is "
                "N − 1 = 2, but the first N − 1 updates found fewer gradients in flight.")
def _q7_2(answer):
    values = staleness_of(*LOG)
    return judge_number(
        answer, "your prediction", sum(values) / len(values),
        hints={2.0: "2 = N − 1 is the steady state; the first two updates were applied with fewer "
                    "gradients in flight (staleness 0, then 1).",
               3.0: "3 is the number of workers; an update is made stale only by the OTHER "
                    "workers' updates, N − 1 = 2 at most here.",
               1.0: "1 is the staleness of the second update only; most updates are 2 stale."},
        fallback="Write down each update's staleness first (count the applies strictly between its "
                 "read and its own apply), then average.")


WORKER_SECONDS, BATCH, STALENESS_LIMIT = (1.0, 1.0, 1.0, 3.0), 32, 2  # q7.3's cluster
CHOICES = {"A": "synchronous over all 4", "B": "asynchronous over all 4",
           "C": "synchronous over the 3 fast workers"}


def throughputs() -> dict[str, float]:
    """Examples per second of each option: a synchronous step waits for its slowest worker;
    asynchronous workers each go at their own pace."""
    fast = [t for t in WORKER_SECONDS if t < max(WORKER_SECONDS)]
    return {"A": len(WORKER_SECONDS) * BATCH / max(WORKER_SECONDS),
            "B": sum(BATCH / t for t in WORKER_SECONDS),
            "C": len(fast) * BATCH / max(fast)}


@question("q7.3", "07_stale_gradients",
          "choose A, B or C for 4 workers (one 3x slower) under a staleness limit of 2; pass "
          "(choice, examples_per_second)",
          right="C: synchronous over the 3 fast workers, 96 examples/s and no staleness. B is "
                "faster (about 107/s) but always-busy asynchronous workers are N − 1 = 3 stale on "
                "average, over the limit; A waits for the straggler every step (about 43/s).",
          parts="(choice, examples_per_second)")
def _q7_3(pick, rates):
    want = throughputs()
    if not isinstance(rates, dict) or sorted(rates) != sorted(want):
        return (f"examples_per_second should be a dict with a number for each option "
                f"{sorted(want)}; got {short(rates)}.")
    for key, value in want.items():
        if not isinstance(rates[key], (int, float)) or not close(rates[key], value):
            hint = {"A": "each synchronous step waits for the slowest worker",
                    "B": "each asynchronous worker sends a batch every time IT finishes a step",
                    "C": "the three fast workers step together"}[key]
            return (f"examples_per_second[{key!r}] is {short(rates[key])}; recompute it: {hint} "
                    f"({BATCH} examples per worker step).")
    if pick == "C":
        return None
    if pick == "B":
        return (f"B is the fastest, but asynchronous workers that are always busy are N − 1 = 3 "
                f"updates stale on average, over the limit of {STALENESS_LIMIT}.")
    if pick == "A":
        return "A keeps every worker but waits for the straggler each step: the slowest option."
    return f"choose one of {sorted(CHOICES)}; got {short(pick)}."


# q7.4: TensorFlow's parameter-server loop, written by the student, with worker 1 a straggler.
PS_STEPS, SLOW_WORKER, PS_WORKERS = 60, 1, 3


def _log_rows(functions) -> list[dict]:
    """The log's records (``strategy.trace.functions``, each handed in as a dict of its fields)."""
    if not isinstance(functions, list) or not all(
            isinstance(f, dict) and {"schedule", "worker", "version_read", "version_written"}
            <= set(f) for f in functions):
        raise Wrong(f"the first part should be strategy.trace.functions (the recording's log of "
                    f"scheduled functions), but it is {short(functions)}.")
    return functions


@question("q7.4", "07_stale_gradients",
          "write step_fn (worker 1 a 0.2 s straggler) and the schedule/join loop of 60 steps; pass "
          "(functions, losses) with functions = strategy.trace.functions",
          right="60 steps scheduled, each run once and logged with its worker and versions, every "
                "loss fetched, the loss going down; worker 1, the straggler, ran the fewest steps "
                "and the most updates landed between its reads and its updates.",
          parts="(functions, losses)")
def _q7_4(functions, losses):
    rows = _log_rows(functions)
    if len(rows) != PS_STEPS or len({f["schedule"] for f in rows}) != PS_STEPS:
        return (f"the log holds {len(rows)} finished functions; expected {PS_STEPS}, each scheduled "
                f"once. Schedule {PS_STEPS} steps with coordinator.schedule(step_fn, args=("
                "per_worker_iterator,)), then coordinator.join() before you read the log.")
    values = numbers(losses, "losses")
    if len(values) != PS_STEPS:
        return (f"losses holds {len(values)} numbers; expected one per scheduled step "
                f"({PS_STEPS}): keep every RemoteValue schedule returns and fetch() each.")
    if not all(math.isfinite(v) for v in values):
        return "some losses are not finite numbers: check the loss and the learning rate."
    fifth = PS_STEPS // 5
    if not sum(values[-fifth:]) < sum(values[:fifth]):
        return (f"the last {fifth} steps' mean loss is not below the first {fifth} steps': does "
                "step_fn apply the gradients (optimizer.apply_gradients) to the model's "
                "trainable variables?")
    counts = [sum(f["worker"] == w for f in rows) for w in range(PS_WORKERS)]
    others = [w for w in range(PS_WORKERS) if w != SLOW_WORKER]
    if not 2 * counts[SLOW_WORKER] <= min(counts[w] for w in others):
        return (f"the steps per worker were {counts}: worker {SLOW_WORKER} was not slow. Put "
                f"logits = mt.straggle(logits, 0.2, worker={SLOW_WORKER}) in the function "
                "strategy.run runs, after the forward pass and before the gradient is computed.")
    stale = {w: [f["version_written"] - 1 - f["version_read"] for f in rows if f["worker"] == w]
             for w in range(PS_WORKERS)}
    mean = {w: sum(s) / len(s) for w, s in stale.items() if s}
    if SLOW_WORKER not in mean or any(mean[SLOW_WORKER] <= mean[w] for w in others if w in mean):
        return (f"worker {SLOW_WORKER}'s steps were not the stalest (mean staleness per worker "
                f"{ {w: round(m, 2) for w, m in mean.items()} }): did worker {SLOW_WORKER} wait inside "
                "the scheduled step, between reading the ps's weights and applying its update?")
    return None
