"""Chapter 03 · Gradients and all-reduce: combining the replicas' gradients, and scaling the loss.

The rules taught: the all-reduce SUMS the replicas' contributions, so what each replica
contributes decides what is applied. q3.1: replicas that averaged over shards of different sizes
(an uneven last batch, chapter 02) must be weighted by their example counts to give the gradient
of the mean over every example. q3.2–q3.3 (predict, then observe): a loss divided by a constant
``global_batch_size`` of 64 on the last batch, which holds only 58 examples, applies 58/64 of the
full-batch gradient (``trace.gradient_scale`` measures it).
"""

from __future__ import annotations

import numpy as np

from ..checks import Function, fmt, judge_number, number, question, short


def replica_gradients(counts: list[int]) -> tuple[list[np.ndarray], list[int]]:
    """A case of q3.1 made concrete: replica r's mean gradient is a small array that differs per
    replica (zeros for an empty shard, as compute_average_loss gives), and its example count."""
    grads = [np.array([r + 1.0, -0.5 * (r + 1), 2.0 ** r]) if c else np.zeros(3)
             for r, c in enumerate(counts)]
    return grads, list(counts)


def global_mean(counts: list[int]) -> np.ndarray:
    """The gradient of the mean loss over every example: Σ count_r · g_r / Σ count_r."""
    grads, _ = replica_gradients(counts)
    return sum(c * g for c, g in zip(counts, grads)) / sum(counts)


COMBINE_CASES = (([16, 16, 16, 16],), ([15, 15, 15, 13],), ([2, 1],))  # public; the key hides more


@question("q3.1", "03_gradients_allreduce",
          "write global_gradient(per_replica_means, counts): the gradient of the mean over all examples",
          right="your global_gradient weights each replica's mean gradient by its number of "
                "examples: Σ count_r · g_r / Σ count_r, right for even shards, uneven ones and "
                "empty ones.",
          kind=Function("global_gradient", COMBINE_CASES, build=replica_gradients))
def _q3_1(calls):
    for (counts,), result in calls:
        want = global_mean(counts)
        try:
            got = np.asarray(result, dtype=float).ravel()
        except (TypeError, ValueError):
            return f"{calls.shown([counts])} returned {short(result)}; expected one array of 3 numbers."
        if got.shape != want.shape:
            return f"{calls.shown([counts])} returned {got.size} numbers; expected {want.size}."
        if np.allclose(got, want):
            continue
        grads, _ = replica_gradients(counts)
        if np.allclose(got, sum(grads) / len(grads)):
            return (f"for counts {counts} you averaged the replicas' means. With uneven shards each "
                    "replica's mean stands for a different number of examples: weight it by its "
                    "count, then divide by the total.")
        if np.allclose(got, sum(grads)):
            return f"for counts {counts} you returned the plain SUM of the means; weight and divide."
        return (f"for counts {counts} you returned {[fmt(v) for v in got]}; expected "
                f"{[fmt(v) for v in want]} (Σ count_r · g_r / Σ count_r).")
    return None


LAST_BATCH, DIVISOR = 58, 64  # examples in the last batch; the constant the loss divides by


@question("q3.2", "03_gradients_allreduce",
          "predict trace.gradient_scale on a last batch of 58 when the loss divides by 64",
          right="58/64 = 0.90625: the replicas' losses add up to the sum over 58 examples divided "
                "by 64, so the step applies 58/64 of the full-batch gradient.")
def _q3_2(answer):
    return judge_number(
        answer, "your prediction", LAST_BATCH / DIVISOR,
        hints={1.0: "1.0 holds only when the batch really has global_batch_size examples; this "
                    "one has 58 but the loss still divides by 64.",
               DIVISOR / LAST_BATCH: "that is 64/58, upside down: the sum over 58 examples is "
                                     "divided by the larger 64.",
               4.0: "4 is the replica count; here every replica divides by the same 64."},
        fallback="Write the applied gradient as (sum over 58 examples) / 64 and compare it with "
                 "the mean over 58.")


@question("q3.3", "03_gradients_allreduce",
          "run the step on the last batch; pass (trace.gradient_scale, the divisor that makes it 1.0)",
          parts="(scale, divisor)",
          right="the trace measures 58/64 = 0.90625, and dividing the last batch's loss by its 58 "
                "examples makes it 1.0 (or batch with drop_remainder=True).")
def _q3_3(scale, divisor):
    scale = number(scale, "the measured scale")
    if scale == 0:
        return ("the scale is 0: no gradient was applied. Run train_step on the last batch "
                "before reading strategy.trace.gradient_scale(reference, step=0).")
    if abs(scale - LAST_BATCH / DIVISOR) > 1e-3:
        if abs(scale - 1.0) < 1e-3:
            return ("a scale of 1.0 is a full batch; run the step on the LAST batch (58 examples), "
                    "with the loss line as given.")
        return f"the measured scale is {fmt(scale)}; read it with strategy.trace.gradient_scale."
    return judge_number(
        divisor, "the divisor", LAST_BATCH,
        hints={DIVISOR: "64 is the divisor that made the step too small.",
               LAST_BATCH / 4: "14.5 is a per-replica share; the divisor, compute_average_loss's "
                               "global_batch_size, counts the examples over ALL replicas.",
               15.0: "15 is one replica's shard; the divisor counts the whole batch."},
        fallback="the applied gradient is (sum over the batch) / divisor; the mean divides by "
                 "the number of examples in the batch.",
        said="a divisor of {value} does not make the scale 1.0: {hint}")
