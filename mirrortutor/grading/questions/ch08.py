"""Chapter 08 · Multi-worker: who gets which examples, and what a shard policy really does.

Every question runs chapter 08's worker program (``programs/08_worker.py``, plain TensorFlow)
unchanged in 3 worker processes, ``cluster.run_program(...)``; TensorFlow's
``MultiWorkerMirroredStrategy`` gives a worker without GPUs one replica, so
``replica_id_in_sync_group`` is the worker's index. The rules taught, on a global batch of 40 that
3 workers cannot split evenly (the chapter printed 2 workers and 64):

- ``AutoShardPolicy.DATA`` cuts the global batch as chapter 02's rule cuts it on one machine,
  ``ceil(B / n)`` examples for each replica but the last, which gets what is left
  (:func:`data_shards`): 14, 14 and 12. q8.1 predicts it, q8.2 observes it and names the rule.
- ``OFF`` shards nothing: every worker reads the same global batches from the start and cuts them
  with ``batch_sizes_for_worker`` (tensorflow/python/data/experimental/ops/distribute.py), as even
  as possible and rotated by worker, so step 0 trains worker 0 on examples 0–13 and workers 1 and 2
  on 0–12: 40 examples, 14 of them distinct (:func:`off_distinct`, q8.3).

tests/grading/test_questions.py checks both rules against TensorFlow's own input pipeline.
q8.4 asks for the TensorFlow itself: the input pipeline of chapter 08's worker program, global
batches with ``tf.data.Options().experimental_distribute.auto_shard_policy`` set, run on hidden
inputs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..answers import Function
from ..checks import choice, integers, judge_number, question, short

WORKERS, GLOBAL_BATCH = 3, 40  # the cluster (one replica per worker) and the job of q8.1–q8.3


def data_shards(workers: int = WORKERS, global_batch: int = GLOBAL_BATCH) -> list[list[int]]:
    """``[first, last]`` example of step 0 for each replica_id_in_sync_group (= worker), under
    DATA: ``ceil(B / n)`` examples each, the last replica what is left (empty: ``[]``)."""
    size = math.ceil(global_batch / workers)
    return [[w * size, min((w + 1) * size, global_batch) - 1] if w * size < global_batch else []
            for w in range(workers)]


def off_sizes(workers: int = WORKERS, global_batch: int = GLOBAL_BATCH) -> list[int]:
    """How many examples each worker trains on at step 0 under OFF: the first of its
    ``batch_sizes_for_worker`` (worker 0's sizes, ceil-sized ones first, rotated by the worker's
    index), each counted from example 0 since nothing is sharded."""
    floor, ceil_count = divmod(global_batch, workers)
    worker_0 = [floor + 1] * ceil_count + [floor] * (workers - ceil_count)
    return [worker_0[w] for w in range(workers)]


def off_distinct(workers: int = WORKERS, global_batch: int = GLOBAL_BATCH) -> int:
    """The distinct examples step 0 trains on under OFF: every worker starts at example 0."""
    return max(off_sizes(workers, global_batch))


def _shard_map(answer, what: str) -> list[list[int]]:
    """The answer as one [first, last] pair per replica, or the reason it is not."""
    if not isinstance(answer, list) or len(answer) != WORKERS:
        extra = (" A CPU worker of MultiWorkerMirroredStrategy has ONE replica, so the replicas "
                 "are the 3 workers." if isinstance(answer, list) and len(answer) == 2 * WORKERS
                 else "")
        return (f"{what} should list one [first, last] pair per replica ({WORKERS}), got "
                f"{short(answer)}.{extra}")
    return [integers(pair, f"{what}[{r}]") for r, pair in enumerate(answer)]


def _even(workers: int = WORKERS, global_batch: int = GLOBAL_BATCH) -> list[list[int]]:
    """The tempting wrong map: as even as possible (14, 13, 13)."""
    floor, extra = divmod(global_batch, workers)
    out, first = [], 0
    for w in range(workers):
        size = floor + (w < extra)
        out.append([first, first + size - 1])
        first += size
    return out


def _floor_rest(workers: int = WORKERS, global_batch: int = GLOBAL_BATCH) -> list[list[int]]:
    """The other tempting wrong map: floor(B / n) each, the remainder on the last (13, 13, 14)."""
    size = global_batch // workers
    return [[w * size, (w + 1) * size - 1 if w < workers - 1 else global_batch - 1]
            for w in range(workers)]


@question("q8.1", "08_multi_worker",
          "predict [first, last] example of each replica_id_in_sync_group (3 CPU workers, global "
          "batch 40, DATA)",
          right="replicas 0–2 (one per CPU worker) get examples 0–13, 14–27 and 28–39: DATA cuts "
                "the global batch as chapter 02's rule does, ceil(40 / 3) = 14 examples for each "
                "replica but the last, which gets the 12 left.")
def _q8_1(answer):
    got = _shard_map(answer, "your prediction")
    if isinstance(got, str):
        return got
    if got == data_shards():
        return None
    if got == _even():
        return ("you split the batch as evenly as possible (14, 13, 13). TensorFlow cuts it as "
                "chapter 02 showed: ceil(40 / 3) = 14 examples for each replica but the last, "
                "which gets what is left.")
    if got == _floor_rest():
        return ("you gave floor(40 / 3) = 13 to each replica and the remainder to the last. "
                "TensorFlow rounds UP: ceil(40 / 3) = 14 for each replica but the last.")
    return (f"you predicted {got}; the replicas take consecutive examples of 0–39 in order, "
            "worker 0 first, in chapter 02's sizes.")


RULES = {"A": "ceil(B / n) examples for each replica but the last, which gets what is left",
         "B": "as even as possible: sizes differ by at most one",
         "C": "floor(B / n) examples each, the remainder on the last replica"}


@question("q8.2", "08_multi_worker",
          "observe the shard map of a real 3-worker job; pass (observed, the letter of the rule "
          "that cut the batch)",
          right="the traces show 0–13, 14–27 and 28–39: rule A, ceil(B / n) examples for each "
                "replica but the last, the rule chapter 02 found on one machine; DATA applies it "
                "to the whole cluster's replicas.",
          parts="(observed, rule)")
def _q8_2(observed, rule):
    got = _shard_map(observed, "observed")
    if isinstance(got, str):
        return got
    if got != data_shards():
        return (f"observed is {got}, but the job's traces show {data_shards()}: for each worker "
                "w, read run.trace(w).example_ids(0)[0] (its one replica) and put its smallest "
                "and largest id at position w.")
    letter = choice(rule, "ABC", "the rule")
    if letter == "A":
        return None
    sizes = [last - first + 1 for first, last in got]
    return (f"rule {letter} ({RULES[letter]}) would not give the sizes you observed, {sizes}: "
            f"14 = ceil(40 / 3) for replicas 0 and 1, and the 12 left for replica 2.")


@question("q8.3", "08_multi_worker",
          "run the job with --shard-policy OFF; how many distinct examples did step 0 train on?",
          right="14 distinct examples, though step 0 trained on 40 (14 + 13 + 13): with OFF every "
                "worker reads the same global batches from example 0, so most examples are used "
                "three times, and nothing warns.")
def _q8_3(answer):
    return judge_number(
        answer, "the number of distinct examples", off_distinct(),
        hints={40.0: "40 is the global batch, what step 0 trained on counting repeats; count the "
                     "DISTINCT example ids over the three workers' traces (a set).",
               13.0: "13 is what workers 1 and 2 read (examples 0–12); worker 0 read 0–13.",
               12.0: "12 is what replica 2 got under DATA; this run is OFF: read its traces.",
               120.0: "that counts every example more than once; put the ids in one set."},
        fallback="Put every example id of step 0, from all three workers' traces, in one set.",
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
