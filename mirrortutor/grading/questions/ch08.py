"""Chapter 08 · Multi-worker: who gets which examples, and what a shard policy really does.

The rules taught: with ``AutoShardPolicy.DATA`` the global batch is cut into one per-replica batch
per replica of the whole cluster, and the workers take them in turn, worker w keeping batches w,
w + W, … (:func:`data_shards`); TensorFlow numbers the replicas ``replica_id_in_sync_group = w ×
replicas_per_worker + local replica``, so replica ids and batch order differ (q8.1 predicts it,
q8.2 observes it on a real two-process job). With ``OFF`` every worker reads the same examples,
so a step trains on fewer distinct examples than its global batch (q8.3). q8.4 asks for the
TensorFlow itself: the input pipeline of chapter 08's worker program, global batches with
``tf.data.Options().experimental_distribute.auto_shard_policy`` set, run on hidden inputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..answers import Function
from ..checks import integers, judge_number, question, short

WORKERS, REPLICAS_PER_WORKER, GLOBAL_BATCH = 2, 2, 32  # the cluster and job of every question


def data_shards(workers: int = WORKERS, per_worker: int = REPLICAS_PER_WORKER,
                global_batch: int = GLOBAL_BATCH) -> list[list[int]]:
    """``[first, last]`` example of step 0 for each replica_id_in_sync_group, under DATA."""
    size = global_batch // (workers * per_worker)
    out = []
    for w in range(workers):
        for local in range(per_worker):
            batch = w + local * workers  # worker w keeps per-replica batches w, w + W, ...
            out.append([batch * size, batch * size + size - 1])
    return out


def _shard_map(answer, what: str) -> list[list[int]]:
    """The answer as one [first, last] pair per replica, or the reason it is not."""
    if not isinstance(answer, list) or len(answer) != WORKERS * REPLICAS_PER_WORKER:
        return f"{what} should list one [first, last] pair per replica (4), got {short(answer)}."
    return [integers(pair, f"{what}[{r}]") for r, pair in enumerate(answer)]


@question("q8.1", "08_multi_worker",
          "predict [first, last] example of each replica_id_in_sync_group (2 workers × 2, batch 32, DATA)",
          right="replicas 0–3 get examples 0–7, 16–23, 8–15 and 24–31: the batch is cut into 4 "
                "per-replica batches of 8 and worker w keeps batches w and w + 2, while replica ids "
                "count worker 0's replicas first.")
def _q8_1(answer):
    got = _shard_map(answer, "your prediction")
    if isinstance(got, str):
        return got
    want = data_shards()
    if got == want:
        return None
    if got == [[8 * r, 8 * r + 7] for r in range(4)]:
        return ("you gave replica r the r-th batch of 8. The workers take the per-replica batches "
                "in turn (worker 0: batches 0 and 2, worker 1: batches 1 and 3), and replica ids "
                "number worker 0's two replicas first.")
    return f"you predicted {got}; each replica gets 8 consecutive examples, but not in replica order."


@question("q8.2", "08_multi_worker",
          "observe the shard map of a real 2-worker job; pass (observed, which per-replica batch "
          "replica 1 got)",
          right="the traces show 0–7, 16–23, 8–15 and 24–31: replica 1, worker 0's second replica, "
                "gets per-replica batch 2, because the workers take the batches in turn and replica "
                "ids count each worker's replicas together.",
          parts="(observed, batch)")
def _q8_2(observed, batch):
    got = _shard_map(observed, "observed")
    if isinstance(got, str):
        return got
    if got != data_shards():
        return (f"observed is {got}, but the job's traces show {data_shards()}: for each worker w "
                "and local replica r, read run.trace(w).example_ids(0)[r] and put it at w × 2 + r.")
    return judge_number(
        batch, "the batch number", 2,
        hints={1.0: "batch 1 (examples 8–15) went to worker 1; replica 1 is worker 0's second "
                    "replica.",
               8.0: "count batches (0–3 of 8 examples each), not examples."},
        fallback="the 32 examples make per-replica batches 0–3 of 8 examples; which one holds "
                 "examples 16–23?",
        said="replica 1 did not get batch {value}: {hint}")


@question("q8.3", "08_multi_worker",
          "run the job with shard_policy OFF; how many distinct examples did step 0 train on?",
          right="16 distinct examples for a global batch of 32: with OFF both workers read the same "
                "data, so every example is used twice and nothing warns.")
def _q8_3(answer):
    return judge_number(
        answer, "the number of distinct examples", GLOBAL_BATCH // WORKERS,
        hints={32.0: "32 is the global batch; count the DISTINCT example ids over both workers' "
                     "traces (a set).",
               8.0: "8 is one replica's share; count over all replicas of both workers.",
               64.0: "64 is more than the batch holds; count distinct ids in step 0 only."},
        fallback="Put every example id of step 0, from both workers' traces, in one set.",
        said="you counted {value}. {hint}")


# ---- q8.4: the input pipeline, in TensorFlow ---------------------------------------------------
MAX_BATCHES = 50  # batches of one dataset handed over as data


def describe_dataset(dataset) -> dict:
    """A ``tf.data.Dataset`` as data, in the student's kernel: its auto-shard policy, its static
    batch size and its batches' element numbers (the judge never sees TensorFlow)."""
    import numpy as np
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        return {"type": type(dataset).__name__}
    policy = dataset.options().experimental_distribute.auto_shard_policy
    shape = getattr(dataset.element_spec, "shape", None)
    return {"type": "Dataset", "policy": getattr(policy, "name", str(policy)),
            "batch_dim": None if shape is None or shape.rank in (None, 0) else shape[0],
            "batches": [np.asarray(b).tolist() for b in dataset.take(MAX_BATCHES)]}


@dataclass(frozen=True)
class DatasetFunction(Function):
    """A function answer that returns a ``tf.data.Dataset``: each call's dataset is handed over
    as :func:`describe_dataset` describes it."""

    def export(self, fn, hidden: list) -> dict:
        if callable(fn):  # the student's source stays readable through the wrapper (__wrapped__)
            student = fn
            fn = functools.wraps(student)(lambda *args: describe_dataset(student(*args)))
        return super().export(fn, hidden)


def pipeline(num_examples: int, global_batch_size: int, policy: str) -> dict:
    """What ``input_pipeline`` should make, described as :func:`describe_dataset` does."""
    full = num_examples // global_batch_size
    return {"type": "Dataset", "policy": policy, "batch_dim": global_batch_size,
            "batches": [list(range(b * global_batch_size, (b + 1) * global_batch_size))
                        for b in range(min(full, MAX_BATCHES))]}


PIPELINE_CASES = ((64, 16, "DATA"), (50, 16, "OFF"), (40, 8, "FILE"))


@question("q8.4", "08_multi_worker",
          "write input_pipeline(num_examples, global_batch_size, policy): tf.data global batches "
          "of the example numbers, full batches only, with auto_shard_policy set to policy",
          right="your input_pipeline makes the program's global batches (every one full, so each "
                "step splits the same way over every worker) and tells "
                "experimental_distribute_dataset how to shard them, through "
                "tf.data.Options().experimental_distribute.auto_shard_policy.",
          kind=DatasetFunction("input_pipeline", PIPELINE_CASES))
def _q8_4(calls):
    for (n, g, policy), got in calls:
        want = pipeline(n, g, policy)
        if got == want:
            continue
        shown = f"input_pipeline({n}, {g}, {policy!r})"
        if not isinstance(got, dict) or got.get("type") != "Dataset":
            return (f"{shown} returned {short(got)}; return the tf.data.Dataset itself "
                    "(tf.data.Dataset.range(num_examples).batch(...), with its options).")
        if got.get("policy") != policy:
            unset = got.get("policy") == "AUTO"
            return (f"{shown} has auto_shard_policy {got.get('policy')}, not {policy}" +
                    (": the option was never set. Make a tf.data.Options(), set "
                     "options.experimental_distribute.auto_shard_policy = "
                     "tf.data.experimental.AutoShardPolicy[policy], and return "
                     "dataset.with_options(options)." if unset else "."))
        batches = got.get("batches")
        if isinstance(batches, list) and batches and batches[:len(want["batches"])] == \
                want["batches"] and len(batches) > len(want["batches"]):
            return (f"{shown} ends with a short batch {short(batches[-1])}: pass "
                    "drop_remainder=True to batch(), so that every step is a full global batch.")
        if batches != want["batches"]:
            return (f"{shown} gave the batches {short(batches)}; expected {short(want['batches'])}: "
                    f"the numbers 0 to {n - 1}, in order, in batches of {g}.")
        if got.get("batch_dim") != g:
            return (f"{shown} has the right batches, but its batch dimension is unknown to "
                    "TensorFlow (None): batch with drop_remainder=True.")
    return None
