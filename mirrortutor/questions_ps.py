"""Exercise questions for the parameter-server chapters: stale gradients, counted by hand.

No cluster runs here: staleness is arithmetic on an update log (which update read which version,
which version it was applied to), so these questions are plain numpy and reasoning, and their
checks are exact. The rules are chapter 07's: staleness = version applied − version read; with N
workers the mean is at most N − 1, and about (N − 1) × the share of time a worker holds a gradient
in flight; the staleness-aware rate (Zhang et al. 2016) is ``learning_rate / max(1, staleness)``.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import Wrong, call, close, fmt, integers, number, numbers, question, short

# (read time, apply time) of every update, in the order the ps applied them.
TIMELINES = [
    ([0.0, 1.0, 2.0, 3.5, 4.5, 5.5], [3.0, 4.0, 5.0, 6.5, 7.5, 8.5]),  # 3 workers, always busy
    ([0.0, 0.0, 1.5, 2.5, 0.0, 3.5], [1.0, 2.0, 3.0, 4.0, 4.5, 5.0]),  # update 4: a straggler
    ([0.0], [1.0]),                                                     # one worker, one update
]


def staleness_of(reads, applies) -> list[int]:
    """How many other updates landed between each update's read and its own apply."""
    return [sum(1 for j, t in enumerate(applies) if j != i and reads[i] < t < applies[i])
            for i in range(len(applies))]


@question("q7.1", "07_stale_gradients",
          "write staleness(reads, applies): per update, the updates applied between its read and apply",
          right="your staleness(…) counts, for every update, the others applied between its read and "
                "its own apply: version applied − version read, straggler included.")
def _q7_1(staleness):
    for reads, applies in TIMELINES:
        want = staleness_of(reads, applies)
        got = integers(call(staleness, "staleness", list(reads), list(applies)),
                       f"staleness({reads}, {applies})")
        if got == want:
            continue
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


@question("q7.2", "07_stale_gradients",
          "expected mean staleness with 4 workers, each holding a gradient 60% of the time",
          right="about 1.8 = (N − 1) × 0.6: each update is made staler by the other gradients in "
                "flight, at most N − 1 = 3 of them, and each is in flight 60% of the time.")
def _q7_2(answer):
    value = number(answer, "your expected staleness")
    if close(value, 1.8):
        return None
    hints = {3.0: "3 = N − 1 is the bound, reached only if every worker always held a gradient.",
             2.4: "2.4 = N × 0.6 counts the update's own worker; only the N − 1 others make it stale.",
             0.6: "0.6 is one other worker's share; there are N − 1 = 3 others."}
    hint = next((h for k, h in hints.items() if close(value, k)), "Use (N − 1) × the in-flight share.")
    return f"you gave {fmt(value)}. {hint}"


@question("q7.3", "07_stale_gradients",
          "staleness-aware learning rates for staleness [0, 1, 2, 4] and learning_rate 0.5",
          right="0.5, 0.5, 0.25 and 0.125: learning_rate / max(1, staleness), so a fresh gradient "
                "(staleness 0) keeps the full rate.")
def _q7_3(answer):
    try:
        values = np.asarray(answer, dtype=float).ravel()
    except (TypeError, ValueError):
        raise Wrong(f"expected a list of 4 learning rates, got {short(answer)}.") from None
    if not np.isfinite(values).all():
        return (f"you gave {[fmt(v) for v in values]}: staleness 0 was divided by zero. Use "
                "np.maximum(1, staleness).")
    got = numbers(values.tolist(), "your learning rates")
    want = [0.5 / max(1, s) for s in (0, 1, 2, 4)]
    if len(got) != 4:
        raise Wrong(f"give one rate per update (4), got {len(got)}.")
    if all(close(g, w) for g, w in zip(got, want)):
        return None
    shown = [fmt(g) for g in got]
    if all(close(g, 0.5 / (s + 1)) for g, s in zip(got, (0, 1, 2, 4))):
        return f"you gave {shown}: learning_rate / (s + 1). Zhang et al. divide by s itself, with s at least 1."
    return f"you gave {shown}; expected learning_rate / max(1, s) for each staleness s."


# ---- chapter 06: where a parameter server keeps the variables, and what flows through it --------

def ps_placement(num_variables: int, num_ps: int) -> list[int]:
    """ParameterServerStrategy without a partitioner: variables go round-robin over the ps tasks,
    in creation order (chapter 06 shows it; tests check it against a real cluster)."""
    return [i % num_ps for i in range(num_variables)]


def tf_num_shards(rows: int, cols: int, min_shard_bytes: int, max_shards: int) -> int:
    """How many shards TensorFlow's own MinSizePartitioner makes of a (rows, cols) float32 variable."""
    import tensorflow as tf

    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=min_shard_bytes, max_shards=max_shards)
    return int(partitioner(tf.TensorShape([rows, cols]), tf.float32)[0])


PLACEMENTS = [(4, 2), (5, 2), (7, 3), (3, 4)]  # (variables, ps tasks)
SHARDINGS = [(1000, 8, 16_384, 2), (1000, 8, 8_000, 3), (1000, 8, 40_000, 4), (10, 4, 16, 8)]


@question("q6.1", "06_parameter_servers",
          "write placement(num_variables, num_ps): the ps task each variable lands on",
          right="your placement(…) deals the variables round-robin over the ps tasks, in the order "
                "they are created: variable i lands on ps i mod num_ps.")
def _q6_1(placement):
    for n, ps in PLACEMENTS:
        want = ps_placement(n, ps)
        got = integers(call(placement, "placement", n, ps), f"placement({n}, {ps})")
        if got == want:
            continue
        if len(got) != n:
            return f"placement({n}, {ps}) gave {len(got)} tasks; give one per variable ({n})."
        if got == [min(i, ps - 1) for i in range(n)] or got == [i * ps // n for i in range(n)]:
            return (f"placement({n}, {ps}) gave {got}: blocks of neighbouring variables. The "
                    "strategy deals them like cards instead: ps 0, ps 1, …, then ps 0 again.")
        return f"placement({n}, {ps}) gave {got}; expected {want}: variable i goes to ps i mod num_ps."
    return None


@question("q6.2", "06_parameter_servers",
          "write num_shards(rows, cols, min_shard_bytes, max_shards) as MinSizePartitioner does",
          right="your num_shards(…) agrees with TensorFlow's MinSizePartitioner: as many shards as "
                "it takes to keep each at about min_shard_bytes (rounding up), never more than "
                "max_shards, never fewer than 1.")
def _q6_2(num_shards):
    for rows, cols, min_bytes, most in SHARDINGS:
        want = tf_num_shards(rows, cols, min_bytes, most)
        got = integers([call(num_shards, "num_shards", rows, cols, min_bytes, most)],
                       f"num_shards({rows}, {cols}, {min_bytes}, {most})")[0]
        if got == want:
            continue
        size = rows * cols * 4
        hint = ""
        if got == max(1, min(most, size // min_bytes)):
            hint = (f" {size} bytes / {min_bytes} = {size / min_bytes:.2f}: TensorFlow rounds UP, "
                    "since the bytes left over still need a shard.")
        elif got == min(most, math.ceil(rows * cols / min_bytes)):
            hint = " Count bytes, not elements: each float32 element is 4 bytes."
        return (f"num_shards({rows}, {cols}, {min_bytes}, {most}) gave {got}; TensorFlow's "
                f"MinSizePartitioner makes {want}.{hint}")
    return None


@question("q6.3", "06_parameter_servers",
          "bytes through ONE ps per round: 1,000,000 float32 parameters, 4 workers, one step each",
          right="32,000,000 bytes = 2 × 4 bytes × 1,000,000 parameters × 4 workers: every worker "
                "pulls every weight and pushes a gradient for it, all through the one ps link.")
def _q6_3(answer):
    value = number(answer, "your byte count")
    if close(value, 32e6):
        return None
    hints = {16e6: "that counts only one direction: each worker pulls the weights AND pushes its "
                   "gradients.",
             8e6: "that is one worker's traffic; all 4 go through the same ps.",
             4e6: "that is one worker's pull alone; count the push and all 4 workers.",
             2e6: "that counts parameters, not bytes: a float32 is 4 bytes.",
             24e6: "a ring all-reduce would move 2(n−1)/n·S per GPU; here every byte meets at the ps."}
    hint = next((h for k, h in hints.items() if close(value, k)),
                "count pull + push, 4 bytes per parameter, for every worker.")
    return f"you gave {fmt(value)} bytes: {hint}"
