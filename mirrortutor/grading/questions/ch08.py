"""Chapter 08 · Multi-worker: who gets which examples, and what a shard policy really does.

q8.1–q8.3 run chapter 08's worker program (``programs/08_worker.py``, plain TensorFlow)
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
q8.4 asks for TensorFlow the chapter did not write: the other way in,
``strategy.distribute_datasets_from_function(dataset_fn)``, which neither shards nor batches what
``dataset_fn`` returns (``Strategy.distribute_datasets_from_function``, distribute_lib.py). The
student's ``worker_input(input_context, ...)`` keeps this worker's examples
(``shard(num_input_pipelines, input_pipeline_id)``) in full batches of the per-replica size
(``input_context.get_per_replica_batch_size``, :func:`worker_batches`); the check calls it with the
``tf.distribute.InputContext`` each worker of a cluster gets, on hidden cases too.
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


# ---- q8.4: each worker reads only its own examples, in TensorFlow -----------------------------
MAX_BATCHES = 50  # batches of one dataset handed over as data


def describe_dataset(dataset) -> dict:
    """A ``tf.data.Dataset`` as data, in the student's kernel: its static batch size and its
    batches' element numbers (the judge never sees TensorFlow)."""
    import numpy as np
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        return {"type": type(dataset).__name__}
    shape = getattr(dataset.element_spec, "shape", None)
    return {"type": "Dataset",
            "batch_dim": None if shape is None or shape.rank in (None, 0) else shape[0],
            "batches": [np.asarray(b).tolist() for b in dataset.take(MAX_BATCHES)]}


def input_context(workers: int, worker: int, replicas_per_worker: int, *rest) -> tuple:
    """A case ``[workers, worker, replicas_per_worker, num_examples, global_batch_size]`` as the
    call's arguments: the ``tf.distribute.InputContext`` that ``MultiWorkerMirroredStrategy``
    gives ``dataset_fn`` on that worker (``CollectiveAllReduceExtended._make_input_context``,
    collective_all_reduce_strategy.py), then the two numbers. Runs in the student's kernel."""
    import tensorflow as tf

    context = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=worker,
                                         num_replicas_in_sync=workers * replicas_per_worker)
    return (context, *rest)


@dataclass(frozen=True)
class DatasetFunction(Function):
    """A function answer that returns a ``tf.data.Dataset``: each call's dataset is handed over
    as :func:`describe_dataset` describes it."""

    def export(self, fn, hidden: list) -> dict:
        if callable(fn):  # the student's source stays readable through the wrapper (__wrapped__)
            student = fn
            fn = functools.wraps(student)(lambda *args: describe_dataset(student(*args)))
        return super().export(fn, hidden)


def worker_examples(workers: int, worker: int, num_examples: int) -> list[int]:
    """The example numbers worker ``worker`` reads: every ``workers``-th from its own index
    (``Dataset.shard(workers, worker)``)."""
    return list(range(worker, num_examples, workers))


def worker_batches(workers: int, worker: int, replicas_per_worker: int, num_examples: int,
                   global_batch_size: int) -> dict:
    """What ``worker_input`` should make on that worker, described as :func:`describe_dataset`
    does: its examples in full batches of the per-replica size, global batch / (workers ×
    replicas per worker), since each of its replicas takes one batch per step."""
    per_replica = global_batch_size // (workers * replicas_per_worker)
    ids = worker_examples(workers, worker, num_examples)
    return {"type": "Dataset", "batch_dim": per_replica,
            "batches": [ids[b * per_replica:(b + 1) * per_replica]
                        for b in range(min(len(ids) // per_replica, MAX_BATCHES))]}


# [workers, worker, replicas per worker, num_examples, global_batch_size]
WORKER_CASES = ((3, 1, 1, 100, 12), (2, 0, 2, 64, 16), (4, 3, 1, 40, 8))


@question("q8.4", "08_multi_worker",
          "write worker_input(input_context, num_examples, global_batch_size): the dataset_fn "
          "of strategy.distribute_datasets_from_function, this worker's examples only, in "
          "per-replica batches",
          right="your worker_input reads only this worker's examples (shard by the input "
                "context's num_input_pipelines and input_pipeline_id) and batches them by "
                "input_context.get_per_replica_batch_size(global_batch_size): each replica takes "
                "one batch per step, so a step trains on the global batch, and no two workers "
                "read the same example.",
          kind=DatasetFunction("worker_input", WORKER_CASES, build=input_context))
def _q8_4(calls):
    for case, got in calls:
        workers, worker, replicas, n, g = case
        want = worker_batches(*case)
        if got == want:
            continue
        shown = (f"on worker {worker} of {workers} ({replicas} replica(s) each), "
                 f"worker_input(input_context, {n}, {g})")
        if not isinstance(got, dict) or got.get("type") != "Dataset":
            return (f"{shown} returned {short(got)}; return the tf.data.Dataset itself "
                    "(tf.data.Dataset.range(num_examples), sharded, then batched).")
        batches = got.get("batches") if isinstance(got.get("batches"), list) else []
        sizes = {len(b) for b in batches[:-1] if isinstance(b, list)}
        size = sizes.pop() if len(sizes) == 1 else None
        first = batches[0] if batches and isinstance(batches[0], list) else []
        per_replica = want["batch_dim"]
        if size == g and g != per_replica:
            return (f"{shown} gave batches of {g}, the global batch. distribute_datasets_from_"
                    f"function neither cuts nor shards what dataset_fn returns: each of the "
                    f"{workers * replicas} replicas would take a batch of {g}, and a step would "
                    f"train on {workers * replicas * g} examples. Batch by "
                    f"input_context.get_per_replica_batch_size(global_batch_size) = {per_replica}.")
        if size == g // workers and replicas > 1:
            return (f"{shown} gave batches of {g // workers}, the global batch divided by the "
                    f"workers; but each worker has {replicas} replicas and each takes one batch "
                    f"per step. Batch by input_context.get_per_replica_batch_size("
                    f"global_batch_size) = {per_replica} (the global batch over "
                    "num_replicas_in_sync).")
        if workers > 1 and (first[:2] == [0, 1] or (worker > 0 and first[:1] == [0])):
            return (f"{shown} starts at example {first[0]}: every worker would read the same "
                    "examples (as OFF did in q8.3). Keep this worker's own: dataset.shard("
                    "input_context.num_input_pipelines, input_context.input_pipeline_id).")
        if first[:2] == [worker, worker + workers * replicas] and replicas > 1:
            return (f"{shown} takes every {workers * replicas}th example: you sharded by "
                    f"num_replicas_in_sync. A worker's {replicas} replicas share its one input "
                    "pipeline: shard by input_context.num_input_pipelines (the workers) and "
                    "input_pipeline_id.")
        full = want["batches"]
        if batches[:len(full)] == full and len(batches) > len(full):
            return (f"{shown} ends with a short batch {short(batches[-1])}: pass "
                    "drop_remainder=True to batch(), so that every replica's batch is full and "
                    "every step trains on the global batch.")
        if batches != want["batches"]:
            return (f"{shown} gave the batches {short(batches)}; expected "
                    f"{short(want['batches'])}: examples {worker}, {worker + workers}, "
                    f"{worker + 2 * workers}, … in full batches of {per_replica}.")
        if got.get("batch_dim") != per_replica:
            return (f"{shown} has the right batches, but its batch dimension is unknown to "
                    "TensorFlow (None): batch with drop_remainder=True.")
    return None
