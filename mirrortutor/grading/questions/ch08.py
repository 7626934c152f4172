"""Chapter 08 · Multi-worker: who gets which examples, and what a shard policy really does.

q8.1–q8.3 run chapter 08's worker program (``programs/08_worker.py``, plain TensorFlow)
unchanged in 3 worker processes, ``cluster.run_program(...)``, on 80 examples in global batches
of 40 under ``--shard-policy OFF``; a worker without GPUs has one replica (W = 3, R = 1). Chapter
08 states and prints the ``DATA`` rule; ``OFF`` it explains in words and prints for 2 workers at
step 0 only. The rule (:func:`step_examples`; tests/grading/test_questions.py checks it on TF):
under ``OFF`` every worker reads the same global batches from example 0, cuts each into W·R
sub-batches with ``batch_sizes_for_worker`` (data/experimental/ops/distribute.py: as even as
possible, the first B mod W·R one larger, worker w's list begun at position w·R), and its R
replicas take R of them per step (``DistributedDataset._make_rebatch_fn``, input_lib.py), so with
R = 1 a global batch lasts W steps. q8.1 predicts steps 0 and 1, q8.2 observes them and picks the
explanation, q8.3 counts the steps until every example was trained on: 6, ``DATA``'s 2.

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
from ..checks import Wrong, choice, integers, judge_number, question, short

# The job of q8.1–q8.3: 3 CPU workers (one replica each), 80 examples, global batches of 40.
WORKERS, GLOBAL_BATCH, EXAMPLES = 3, 40, 80
STEPS_ASKED = 2  # q8.1 and q8.2: steps 0 and 1


def step_examples(policy: str, workers: int = WORKERS, global_batch: int = GLOBAL_BATCH,
                  num_examples: int = EXAMPLES, steps: int = STEPS_ASKED,
                  start=lambda worker: worker) -> list[list[list[int]]]:
    """The example numbers each worker's one replica trains on at steps 0, 1, …, as
    ``[worker][step]``, the program reading ``range(num_examples)`` in repeated global batches
    (``drop_remainder``). ``DATA``: global batch ``step``'s sub-batch ``worker``, of
    ``ceil(B / W)`` examples (the last ones get what is left). ``OFF``: sub-batch ``step % W`` of
    global batch ``step // W``, cut in the sizes ``batch_sizes_for_worker`` gives worker 0, begun at
    position ``start(worker)`` (TF's rule; another ``start`` makes a wrong answer's map)."""
    def batch(b: int) -> list[int]:
        first = b % (num_examples // global_batch) * global_batch
        return list(range(first, first + global_batch))

    floor, ceil_count = divmod(global_batch, workers)
    worker_0 = [floor + 1] * ceil_count + [floor] * (workers - ceil_count)
    out = []
    for w in range(workers):
        if policy == "DATA":
            size = math.ceil(global_batch / workers)
            out.append([batch(s)[w * size:(w + 1) * size] for s in range(steps)])
            continue
        sizes = worker_0[start(w):] + worker_0[:start(w)]
        ends = [sum(sizes[:k + 1]) for k in range(workers)]  # of each sub-batch, in a global batch
        out.append([batch(s // workers)[ends[s % workers] - sizes[s % workers]:ends[s % workers]]
                    for s in range(steps)])
    return out


def spans(examples: list[list[list[int]]]) -> list[list[list[int]]]:
    """Each sub-batch of :func:`step_examples` as ``[first, last]`` (``[]`` when empty)."""
    return [[[ids[0], ids[-1]] if ids else [] for ids in worker] for worker in examples]


def steps_for_all(policy: str = "OFF", workers: int = WORKERS, global_batch: int = GLOBAL_BATCH,
                  num_examples: int = EXAMPLES) -> int:
    """How many steps the cluster takes until it has trained on every example at least once
    (of the whole global batches: the program drops a partial last one)."""
    steps = 1
    while len({i for worker in step_examples(policy, workers, global_batch, num_examples, steps)
               for ids in worker for i in ids}) < num_examples // global_batch * global_batch:
        steps += 1
    return steps


def _step_map(answer, what: str) -> list[list[list[int]]]:
    """The answer as ``[worker][step] = [first, last]`` for 3 workers and steps 0 and 1."""
    if not isinstance(answer, list) or len(answer) != WORKERS:
        raise Wrong(f"{what} should hold one entry per worker ({WORKERS}: a CPU worker of "
                    f"MultiWorkerMirroredStrategy has ONE replica), got {short(answer)}.")
    for w, steps in enumerate(answer):
        if not isinstance(steps, list) or len(steps) != STEPS_ASKED \
                or not all(isinstance(pair, list) for pair in steps):
            raise Wrong(f"{what}[{w}] should be [[first, last] at step 0, [first, last] at step "
                        f"1] for worker {w}; got {short(steps)}.")
    return [[integers(pair, f"{what}[{w}][{s}]") for s, pair in enumerate(steps)]
            for w, steps in enumerate(answer)]


@question("q8.1", "08_multi_worker",
          "predict [first, last] example of each worker's replica at steps 0 and 1 (3 CPU "
          "workers, global batch 40, OFF)",
          right="worker 0 trains on 0–13 then 14–26, worker 1 on 0–12 then 13–25, worker 2 "
                "on 0–12 then 13–26: under OFF each worker cuts the same global batch of 40 into "
                "3 sub-batches of batch_sizes_for_worker (14, 13, 13 started at position w) and "
                "its one replica takes one per step.")
def _q8_1(answer):
    got = _step_map(answer, "your prediction")
    if got == spans(step_examples("OFF")):
        return None
    if got == spans(step_examples("DATA")):
        return ("that is DATA's cut (chapter 08's rule): this job runs OFF, which shards nothing. "
                "Every worker reads the same global batches from example 0 and cuts them with "
                "batch_sizes_for_worker.")
    if got == [[[s * GLOBAL_BATCH, s * GLOBAL_BATCH + steps[0][1]] for s in range(STEPS_ASKED)]
               for steps in got]:  # step 1 as step 0, in the next global batch
        return ("you gave each worker a new global batch at step 1. A worker cuts each global "
                f"batch into W·R = {WORKERS} sub-batches and its one replica takes ONE per step: "
                "step 1 takes the next sub-batch of the same global batch.")
    if got == spans(step_examples("OFF", start=lambda w: -w % WORKERS)):
        return ("your sub-batch sizes are rotated the wrong way: batch_sizes_for_worker BEGINS "
                "worker w's list at position w·R of worker 0's (14, 13, 13), so worker 1's is "
                "13, 13, 14 and worker 2's 13, 14, 13.")
    if got == spans(step_examples("OFF", start=lambda w: 0)):
        return ("you cut every worker's global batch with worker 0's sizes (14, 13, 13); "
                "batch_sizes_for_worker rotates them: worker w's list begins at position w·R.")
    return (f"you predicted {got}. Under OFF every worker starts at example 0, cuts each global "
            "batch in batch_sizes_for_worker(40, 3, 1, w)'s sizes, and trains on one a step.")


RULES = {"A": "each worker cuts every global batch in its own rotated sizes, one sub-batch a step",
         "B": "each worker trains on the first sub-batch of a new global batch every step",
         "C": "every worker cuts every global batch in worker 0's sizes, one sub-batch a step"}


@question("q8.2", "08_multi_worker",
          "observe steps 0 and 1 of a real 3-worker OFF job; pass (observed, the letter of the "
          "explanation)",
          right="the traces show 0–13 then 14–26, 0–12 then 13–25, 0–12 then 13–26: A, each "
                "worker cuts the same global batch into W·R = 3 sub-batches of its own sizes and "
                "its one replica takes one per step, so one global batch lasts 3 steps on every "
                "worker.",
          parts="(observed, rule)")
def _q8_2(observed, rule):
    got, want = _step_map(observed, "observed"), spans(step_examples("OFF"))
    if got != want:
        return (f"observed is {got}, but the job's traces show {want}: for each worker w and "
                "step s, read off.trace(w).example_ids(s)[0] (its one replica) and put its "
                "smallest and largest id at observed[w][s].")
    letter = choice(rule, "ABC", "the explanation")
    if letter == "A":
        return None
    return (f"{letter} ({RULES[letter]}) would not give what you observed: " + {
        "B": "step 1 went on with the same global batch (examples below 40).",
        "C": "worker 0 trained on 14 examples at step 0, workers 1 and 2 on 13."}[letter])


OFF_STEPS, DATA_STEPS = steps_for_all("OFF"), steps_for_all("DATA")  # 6 and 2


@question("q8.3", "08_multi_worker",
          "from the OFF job's traces: how many steps until every one of the 80 examples was "
          "trained on?",
          right=f"{OFF_STEPS} steps, where DATA takes {DATA_STEPS}: under OFF all three workers "
                "read the same global batches, each taking a third of one per step, so the "
                "cluster goes through the data at a third of DATA's pace; by then it has trained "
                f"on each example {OFF_STEPS * GLOBAL_BATCH // EXAMPLES} times, and nothing warns.")
def _q8_3(answer):
    return judge_number(
        answer, "the number of steps", OFF_STEPS,
        hints={DATA_STEPS: "That is DATA's count (80 examples, 40 different ones a step); under "
                           "OFF the workers repeat one another: read the traces.",
               OFF_STEPS - 1: "That is the last step's number; steps are counted from 0.",
               3: "3 steps take every worker through ONE global batch (examples 0–39); the job "
                  "has 80 examples."},
        fallback="Go through the steps in order, putting every example id of all three workers' "
                 "traces in one set, until it holds all 80.",
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
