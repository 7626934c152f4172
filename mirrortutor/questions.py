"""The exercise questions, chapter by chapter: what each expects, and what each mistake means.

Each judge gets the student's answer and returns ``None`` when it is right, or a sentence saying
what is wrong (see :mod:`mirrortutor.checks` for the rules those sentences follow). The expected
values are computed here from the rule being taught, not copied from a run: the tests check the
rules against real TensorFlow (the batch split, the MirroredVariable values) and against
:mod:`mirrortutor.allreduce` and :mod:`mirrortutor.costmodel`.
"""

from __future__ import annotations

import math

import numpy as np

from . import costmodel
from .allreduce import ring
from .checks import Wrong, call, close, fmt, integers, number, numbers, question, short

# ---- 01 · MirroredVariable ----


@question("q1.1", "01_mirrored_variable",
          "predict every copy of a MEAN variable holding 2.0 after each of 8 replicas assigns its id",
          right="every copy holds 3.5, the mean of the replica ids 0, 1, …, 7. Under MEAN the "
                "replicas' values are averaged, and assign replaces the old 2.0.")
def _q1_1(answer):
    values = numbers(answer, "your prediction")
    if len(values) not in (1, 8):
        return f"give one number, or a list of the 8 copies; you gave {len(values)} values."
    if all(close(v, 3.5) for v in values):
        return None
    if values == [float(i) for i in range(8)]:
        return ("0, 1, …, 7 is what aggregation=NONE leaves: each replica writes only its own copy. "
                "Under MEAN the 8 values are averaged first, then written to every copy.")
    hints = {5.5: "5.5 is 2.0 + 3.5: that is assign_add. assign replaces the old value.",
             28.0: "28 is the SUM of the ids 0 + 1 + … + 7; this variable's aggregation is MEAN.",
             0.0: "0 is replica 0's value: that is ONLY_FIRST_REPLICA, not MEAN.",
             2.0: "2.0 is the old value, but every replica assigned a new one."}
    value = values[0]
    hint = next((h for k, h in hints.items() if close(value, k)), "Average what the replicas assign.")
    return f"you predicted {fmt(value)}, but every copy holds another value. {hint}"


@question("q1.2", "01_mirrored_variable",
          "make the MEAN variable on 8 devices, have each replica assign its id, pass the variable",
          right="a MirroredVariable with 8 copies, aggregation MEAN, every copy 3.5: TensorFlow "
                "agrees with your prediction.")
def _q1_2(variable):
    import tensorflow as tf

    if not isinstance(variable, tf.distribute.DistributedValues):
        return (f"expected a MirroredVariable, got {type(variable).__name__}. Create it inside "
                "`with strategy.scope():` of mt.MirroredStrategy(devices).")
    copies = [float(c.numpy()) for c in variable.values]
    if len(copies) != 8:
        return f"it has {len(copies)} copies; build the strategy over all 8 devices."
    if variable.aggregation != tf.VariableAggregation.MEAN:
        return (f"its aggregation is {variable.aggregation.name}; create it with "
                "aggregation=tf.VariableAggregation.MEAN.")
    if not all(close(c, 3.5) for c in copies):
        return (f"its copies hold {[fmt(c) for c in copies]}, expected 3.5 each. Does every replica "
                "assign tf.cast(replica_id_in_sync_group, tf.float32) inside strategy.run?")
    return None


@question("q1.3", "01_mirrored_variable",
          "predict a SUM variable holding 1.0 after each of 4 replicas does assign_add(id + 1)",
          right="11.0 on every copy: 1.0 plus the SUM of the increments 1 + 2 + 3 + 4.")
def _q1_3(answer):
    value = number(answer, "your prediction")
    if close(value, 11.0):
        return None
    hints = {10.0: "10 is the sum of the increments, but assign_add adds it to the old 1.0.",
             3.5: "3.5 is 1.0 plus their MEAN (2.5); this variable's aggregation is SUM.",
             2.0: "2.0 is 1.0 plus replica 0's increment only: that is ONLY_FIRST_REPLICA."}
    hint = next((h for k, h in hints.items() if close(value, k)), "Add the increments, then add.")
    return f"you predicted {fmt(value)}. {hint}"


# ---- 02 · Replicas and shards ----

def tf_split(global_batch_size: int, num_replicas: int) -> list[int]:
    """How ``experimental_distribute_dataset`` cuts one batch: ceil(B/n) each, then the rest."""
    per = math.ceil(global_batch_size / num_replicas)
    return [max(0, min(per, global_batch_size - per * r)) for r in range(num_replicas)]


SPLIT_CASES = [(64, 4), (58, 4), (50, 4), (13, 4), (5, 4), (58, 3), (13, 8), (7, 1)]


@question("q2.1", "02_replicas_and_shards",
          "write split_sizes(global_batch_size, num_replicas): each replica's per-replica batch",
          right="your split_sizes cuts every batch as TensorFlow does: ceil(B / n) examples for "
                "the first replicas, the rest for the next, then empty shards (58 over 4: "
                "15, 15, 15, 13).")
def _q2_1(split_sizes):
    for g, n in SPLIT_CASES:
        got = integers(call(split_sizes, "split_sizes", g, n), f"split_sizes({g}, {n})")
        want = tf_split(g, n)
        if got == want:
            continue
        if len(got) != n:
            return f"split_sizes({g}, {n}) returned {len(got)} sizes; expected one per replica ({n})."
        if sum(got) != g:
            return (f"split_sizes({g}, {n}) returned {got}, which adds up to {sum(got)}, not {g}: "
                    "every example of the global batch goes to exactly one replica.")
        if got[:-1] == [g // n] * (n - 1):
            return (f"split_sizes({g}, {n}) returned {got}: floor(B / n) each and the remainder on "
                    f"the last replica. TensorFlow gives the first replicas ceil({g} / {n}) = "
                    f"{want[0]} each, and the last ones what is left: {want}.")
        return f"split_sizes({g}, {n}) returned {got}; TensorFlow cuts it {want}."
    return None


@question("q2.2", "02_replicas_and_shards",
          "cut a global batch of 50 over 4 replicas with the strategy; list the sizes it made",
          right="13, 13, 13 and 11 examples: the strategy's own cut of 50 over 4, as split_sizes "
                "predicts.")
def _q2_2(answer):
    got = integers(answer, "the observed sizes")
    if got == [13, 13, 13, 11]:
        return None
    if got == [16, 16, 16, 16]:
        return "those are the full batches of 64; take the batch of 50 (digits.take(50))."
    return (f"you listed {got}; read them from strategy.experimental_local_results(...) for one "
            "batch of 50 over 4 replicas.")


# ---- 03 · Gradients and all-reduce ----

ALLREDUCE_CASES = [[np.arange(6.0).reshape(3, 2) * 10 ** r for r in range(4)],
                   [np.array([1, 2, 3], dtype=np.int32) * (r + 1) for r in range(3)],
                   [np.array([2.5, -1.0])]]


@question("q3.1", "03_gradients_allreduce",
          "write allreduce_sum(per_replica): every replica receives the sum of all replicas' arrays",
          right="every replica receives the element-wise sum, in its own array, for 4, 3 and 1 "
                "replicas.")
def _q3_1(allreduce_sum):
    for case in ALLREDUCE_CASES:
        inputs = [a.copy() for a in case]
        out = call(allreduce_sum, "allreduce_sum", inputs)
        n, want = len(case), sum(case)
        if not isinstance(out, (list, tuple)) or len(out) != n:
            return (f"for {n} replicas allreduce_sum returned {short(out)}; expected a list with one "
                    f"array per replica ({n}).")
        for r, got in enumerate(out):
            got = np.asarray(got)
            if got.shape != want.shape:
                return f"replica {r} received shape {got.shape}; expected the input's {want.shape}."
            if np.allclose(got, want / n) and n > 1:
                return "replicas received the MEAN; this all-reduce must SUM the replicas' arrays."
            if not np.allclose(got, want):
                return f"with {n} replicas, replica {r} received {got.tolist()}; expected {want.tolist()}."
        if n > 1 and len({id(a) for a in out}) < n:
            return ("several replicas received the very same array object; each device has its own "
                    "memory, so give every replica its own copy (total.copy()).")
    return None


@question("q3.2", "03_gradients_allreduce",
          "fix the loss scaling; pass trace.gradient_scale(reference, step=0) of your fixed step",
          right="the applied gradient is exactly the full-batch gradient (scale 1.0): each replica "
                "divides its loss by the GLOBAL batch size.")
def _q3_2(answer):
    scale = number(answer, "the gradient scale")
    if abs(scale - 1.0) < 1e-3:
        return None
    n = round(scale)
    if n > 1 and abs(scale - n) < 1e-3 * n:
        return (f"the applied gradient is {n} times the full-batch gradient, the number of replicas: "
                "each replica still divides by its OWN batch size. Use "
                "tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size).")
    if scale < 1 and abs(1 / scale - round(1 / scale)) < 1e-3 * round(1 / scale):
        return (f"the applied gradient is 1/{round(1 / scale)} of the full-batch gradient: the loss "
                "is divided by the global batch size AND by the number of replicas. Divide once.")
    return f"the scale is {fmt(scale)}; a correct step gives 1.0."


# ---- 04 · All-reduce algorithms ----

RING_CASES = [(4, 8), (3, 7), (5, 5), (2, 3)]  # (ranks, elements); 7 over 3 gives chunks 3, 2, 2


@question("q4.1", "04_allreduce_algorithms",
          "write reduce_scatter(buffers): the ring's n-1 reduce-scatter steps, buffers after them",
          right="after n - 1 steps rank r holds the full sum of chunk (r + 1) mod n, and the other "
                "chunks hold exactly the ring's partial sums, for 4, 3, 5 and 2 ranks.")
def _q4_1(reduce_scatter):
    for n, size in RING_CASES:
        values = [np.full(size, 10.0 ** r) for r in range(n)]  # a digit 1 per contributing rank
        want = ring(values, record=True).steps[n - 2].buffers
        out = call(reduce_scatter, "reduce_scatter", [v.copy() for v in values])
        if not isinstance(out, (list, tuple)) or len(out) != n:
            return f"for {n} ranks reduce_scatter returned {short(out)}; expected {n} buffers."
        for r in range(n):
            got = np.asarray(out[r], dtype=float).ravel()
            if got.shape != want[r].shape:
                return f"rank {r}'s buffer has {got.size} elements; expected {size}."
            if not np.allclose(got, want[r]):
                return (f"with {n} ranks holding 1, 10, 100, … (one digit per rank), rank {r} ends with "
                        f"{got.astype(int).tolist()}; the ring gives {want[r].astype(int).tolist()}. "
                        "A 1 in a value marks each rank whose chunk was added. At step s rank r sends "
                        "chunk (r - s) mod n to rank (r + 1) mod n, for s = 0 … n - 2.")
    return None


@question("q4.2", "04_allreduce_algorithms",
          "give (steps, bytes each rank sends) for a ring all-reduce of 100 MB over 8 ranks",
          right="14 steps, 2(n - 1), and 175 MB sent by each rank, 2(n - 1)/n · S.")
def _q4_2(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return f"expected a pair (steps, bytes_per_rank), got {short(answer)}."
    steps, sent = number(answer[0], "the step count"), number(answer[1], "the bytes per rank")
    problems = []
    if steps != 14:
        problems.append(f"{fmt(steps)} steps: the ring takes n - 1 = 7 reduce-scatter steps AND 7 "
                        "all-gather steps" if steps == 7 else f"{fmt(steps)} steps, expected 2(n - 1)")
    if not close(sent, 175e6):
        hint = {700e6: " (that is reduce-to-one's root: (n - 1) · S)",
                87.5e6: " (that is only the reduce-scatter half)",
                200e6: " (2 · S is the limit for many ranks; with 8 it is 2 · 7/8 · S)"}
        extra = next((h for k, h in hint.items() if close(sent, k)), "")
        problems.append(f"{fmt(sent)} bytes per rank{extra}, expected 2(n - 1)/n · S in bytes")
    return "; ".join(problems) + "." if problems else None


# ---- 05 · Scaling experiments ----

SCENARIO = dict(num_parameters=25.6e6, compute_s=0.100)  # ResNet-50-sized, 100 ms per step
OPTIONS = {"A": dict(num_replicas=16, interconnect="eth-10g", algorithm="ring"),
           "B": dict(num_replicas=8, interconnect="pcie3-x16", algorithm="ring"),
           "C": dict(num_replicas=8, interconnect="pcie3-x16", algorithm="reduce_to_one")}


def _speedups() -> dict[str, float]:
    return {k: costmodel.estimate_step(SCENARIO["num_parameters"], SCENARIO["compute_s"],
                                       o["num_replicas"], o["interconnect"],
                                       algorithm=o["algorithm"]).speedup
            for k, o in OPTIONS.items()}


@question("q5.1", "05_scaling_experiments",
          "choose the fastest set-up (A, B or C) and back it with estimate_step for each",
          right="B: 8 GPUs on PCIe 3 with the ring, about {B:.1f} times one GPU's throughput, ahead "
                "of A (16 GPUs over 10 GbE, about {A:.1f}x) and C (reduce-to-one, about {C:.1f}x)."
                .format(**_speedups()))
def _q5_1(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return f"expected a pair (choice, estimates), got {short(answer)}."
    choice, estimates = answer
    if not isinstance(estimates, dict) or sorted(estimates) != sorted(OPTIONS):
        return ("estimates should be a dict with one mt.costmodel.estimate_step(...) result for "
                f"each option {sorted(OPTIONS)}; got {short(estimates)}.")
    for key, option in OPTIONS.items():
        e = estimates[key]
        if not isinstance(e, costmodel.StepEstimate):
            return f"estimates[{key!r}] is {short(e)}; expected what estimate_step returns."
        got = dict(num_replicas=e.num_replicas, interconnect=e.interconnect, algorithm=e.algorithm)
        if got != option or not close(e.gradient_bytes, 4 * SCENARIO["num_parameters"]) \
                or not close(e.compute_s, SCENARIO["compute_s"]):
            return (f"estimates[{key!r}] prices {got} with {fmt(e.gradient_bytes)} gradient bytes "
                    f"and {fmt(e.compute_s)} s of compute; option {key} is {option}, with "
                    f"{fmt(SCENARIO['num_parameters'])} float32 parameters and 0.1 s of compute.")
    speedups = _speedups()
    best = max(speedups, key=speedups.get)
    if choice == best:
        return None
    if choice not in OPTIONS:
        return f"choose one of {sorted(OPTIONS)}; got {short(choice)}."
    return (f"{choice} gives about {speedups[choice]:.1f}x, but {best} about {speedups[best]:.1f}x. "
            "More GPUs only help while the all-reduce stays small next to the compute: compare "
            "each estimate's speedup, not its num_replicas.")


@question("q5.2", "05_scaling_experiments",
          "give (global_batch_size, learning_rate) for 8 replicas of 16 examples, base 0.05 at 1",
          right="global batch 128 (16 × 8) and learning rate 0.4 (0.05 × 8): the linear scaling rule.")
def _q5_2(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return f"expected a pair (global_batch_size, learning_rate), got {short(answer)}."
    batch, lr = number(answer[0], "the global batch size"), number(answer[1], "the learning rate")
    if batch != 128:
        return f"global batch {fmt(batch)}: it is per_replica_batch_size × num_replicas_in_sync."
    if close(lr, 0.4):
        return None
    if close(lr, 0.05):
        return ("learning rate 0.05 is the fixed rule, which chapter 05 showed falling behind: "
                "the batch grew 8 times, so multiply the rate by 8.")
    return f"learning rate {fmt(lr)}; the linear scaling rule multiplies 0.05 by the batch's growth."
