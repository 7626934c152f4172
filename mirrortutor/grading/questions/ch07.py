"""Chapter 07 · Stale gradients: staleness counted by hand from a parameter server's update log.

q7.1–q7.3 run no cluster: staleness is arithmetic on an update log (which update read which
version, which version it was applied to), so these questions are plain numpy and reasoning, and
their checks are exact. The rules are chapter 07's: staleness = version applied − version read (an
apply at the same moment as a read lands before it: a worker reads the weights its own update has
just written); with N workers the mean is at most N − 1, and, for busy workers, about (N − 1) × the
share of time a worker holds a gradient in flight, reached only once the first updates are past
(q7.2 predicts a histogram's mean, warm-up included). q7.3 is a trade-off: with a straggler,
synchronous steps wait for it, asynchronous ones keep going but grow stale, and dropping the
straggler is a third way; the student prices each in examples per second and chooses under a
staleness limit.

q7.4 asks for TensorFlow the chapter did not write: a ``ClusterCoordinator`` loop (``schedule``,
``fetch``, ``join``) that keeps every update at most 1 stale whatever the timing, run on a real
cluster whose worker 1 is a straggler. A step is made stale by the other steps whose increments
land while it runs (the recording reads the version counter first and increments it last,
:mod:`mirrortutor.record.parameter_server`), so a loop that starts at most two steps and no new
one until both have ended keeps it at 1; chapter 07's loop, every step scheduled at once, does
not, and a sliding window (a new step as soon as the oldest ends) need not. The judge reads what
the run left, the recording's log and the fetched losses: every step ran once, the loss went down,
worker 1's steps were slow (the straggler was there), no logged function was more than 1 stale,
and some functions ran at the same time (:func:`_overlapping`), which the loop the question rules
out, one step at a time, never does. One run cannot show "whatever the timing": a loop that got
lucky passes too.
"""

from __future__ import annotations

import math

from ..checks import Function, Wrong, close, disagreements, judge_number, numbers, question, short

# (read times, apply times) of every update, in the order the ps applied them.
TIMELINES = (
    ([0.0, 1.0, 2.0, 3.5, 4.5, 5.5], [3.0, 4.0, 5.0, 6.5, 7.5, 8.5]),  # 3 workers, 0.5 s idle after each update
    ([0.0, 0.0, 1.0, 2.0, 0.0, 3.0], [1.0, 2.0, 3.0, 4.0, 4.5, 5.0]),  # update 4: a straggler;
    # updates 2, 3 and 5 read at the moment their worker's last update landed (it counts before)
    ([0.0], [1.0]),                                                     # one worker, one update
)


def staleness_of(reads, applies) -> list[int]:
    """How many other updates landed between each update's read and its own apply: strictly
    after the read (an apply at the read's moment landed before it) and before its apply."""
    return [sum(1 for j, t in enumerate(applies) if j != i and reads[i] < t < applies[i])
            for i in range(len(applies))]


def _counting_ties(reads, applies) -> list[int]:
    """The slip: an apply at the moment of the read counted as after it."""
    return [sum(1 for j, t in enumerate(applies) if j != i and reads[i] <= t < applies[i])
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
        if got == _counting_ties(reads, applies):
            return (f"for reads {reads} and applies {applies} you gave {got}; expected {want}. You "
                    "counted an apply at the same moment as the read; it landed before the read "
                    "(a worker reads the weights its own update has just written): count only "
                    "applies strictly after the read.")
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


# q7.4: a ClusterCoordinator loop that keeps every update at most 1 stale, worker 1 a straggler.
PS_STEPS, MAX_STALENESS = 40, 1
SLOW_WORKER, SLOW_SECONDS = 1, 0.1  # the set-up's step_fn: mt.straggle(logits, 0.1, worker=1)
FIELDS = {"schedule", "worker", "started", "ended", "version_read", "version_written"}


def _log_rows(functions) -> list[dict]:
    """The log's records (``strategy.trace.functions``, each handed in as a dict of its fields)."""
    if not isinstance(functions, list) or not all(
            isinstance(f, dict) and FIELDS <= set(f) for f in functions):
        raise Wrong(f"the first part should be strategy.trace.functions (the recording's log of "
                    f"scheduled functions), but it is {short(functions)}.")
    return functions


def _overlapping(rows) -> int:
    """How many logged functions ran, for a while, at the same time as another: their
    ``[started, ended]`` intervals meet (both are ``tf.timestamp()`` on this machine's clock).

    The judge asks for at least one. Why that rule holds for the right loop on a loaded
    2-core machine: the loop the question rules out fetches each step before it schedules the
    next, and a step's ``ended`` is stamped on its worker before its result travels back to the
    coordinator, so its functions never meet: 0, whatever the timing. The right loop schedules two
    steps back to back 20 times; it would score 0 only if, in all 20 pairs, the second step
    started after the first had ended, even where the first was worker 1's (at least 0.1 s). A
    stricter rule fails a right loop more easily: a share of the functions (on a busy machine a
    fast step may end before its partner starts), or an update exactly 1 stale (it needs
    the second step's read before the first step's increment, a narrower window than
    ``[started, ended]``).
    """
    spans = [(f["started"], f["ended"]) for f in rows]
    return sum(any(i != j and start <= other_end and other_start <= end
                   for j, (other_start, other_end) in enumerate(spans))
               for i, (start, end) in enumerate(spans))


@question("q7.4", "07_stale_gradients",
          "run 40 steps of step_fn (worker 1 a 0.1 s straggler) with no update more than 1 stale; "
          "pass (functions, losses) with functions = strategy.trace.functions",
          right="40 steps, each run once and logged, every loss fetched, the loss going down, and "
                "no update more than 1 stale with worker 1 a straggler. A step is made stale by "
                "the other steps that end while it runs, so starting at most two and no new one "
                "until both have ended keeps it at 1 whatever the timing; the price is waiting "
                "for the slower of the two, as a synchronous step waits for its straggler.",
          parts="(functions, losses)")
def _q7_4(functions, losses):
    rows = _log_rows(functions)
    if len(rows) != PS_STEPS or len({f["schedule"] for f in rows}) != PS_STEPS:
        return (f"the log holds {len(rows)} finished functions; expected {PS_STEPS}, each scheduled "
                f"once. Schedule {PS_STEPS} steps with coordinator.schedule(step_fn, args=("
                "per_worker_iterator,)) and wait for every one before you read the log (the log "
                "keeps every run of this kernel: restart it and run all).")
    values = numbers(losses, "losses")
    if len(values) != PS_STEPS:
        return (f"losses holds {len(values)} numbers; expected one per scheduled step "
                f"({PS_STEPS}): keep every RemoteValue schedule returns and fetch() each.")
    if not all(math.isfinite(v) for v in values):
        return "some losses are not finite numbers: check the loss and the learning rate."
    fifth = PS_STEPS // 5
    if not sum(values[-fifth:]) < sum(values[:fifth]):
        return (f"the last {fifth} steps' mean loss is not below the first {fifth} steps': run "
                "the set-up cell's step_fn as it is, and fetch the losses in the order you "
                "scheduled the steps.")
    slow = [f["ended"] - f["started"] for f in rows if f["worker"] == SLOW_WORKER]
    if any(s < 0.95 * SLOW_SECONDS for s in slow):
        return (f"worker {SLOW_WORKER}'s steps took as little as {min(slow):.3f} s: the straggler "
                f"was not there. Run the set-up cell's step_fn as it is, with mt.straggle(logits, "
                f"{SLOW_SECONDS}, worker={SLOW_WORKER}).")
    stalest = max(rows, key=lambda f: f["version_written"] - 1 - f["version_read"])
    stale = stalest["version_written"] - 1 - stalest["version_read"]
    if stale > MAX_STALENESS:
        return (f"step {stalest['schedule']} (worker {stalest['worker']}) read version "
                f"{stalest['version_read']} and wrote {stalest['version_written']}: {stale} other "
                f"updates landed while it ran, over the limit of {MAX_STALENESS}. A step is made "
                "stale by every other step that ends while it runs: if a new step starts as soon "
                "as another ends, a slow one sees them all. Start no new step until every running "
                "one has ended, with at most two running.")
    if _overlapping(rows) == 0:
        return ("no two of your steps ran at the same time: each ended before the next started, "
                "so every update is 0 stale, but at every moment two of the three workers sat "
                "idle. The question asks for as many steps at once as the limit allows: schedule "
                "two, fetch both, then the next two.")
    return None
