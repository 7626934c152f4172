"""Chapter 06 · Parameter servers: where the variables live, and what flows through one ps.

The rules taught: without a partitioner, ``ParameterServerStrategy`` deals the variables
round-robin over the ps tasks in creation order (:func:`ps_placement`; the tests check it against
a real cluster), so the load is spread by variable, not by size: q6.1 asks for the bytes each ps
ends up holding. ``MinSizePartitioner`` asks for ceil(bytes / ``min_shard_bytes``) shards, between 1
and ``max_shards`` and at most one per row (:func:`num_shards_rule`, TensorFlow's
``min_max_variable_partitioner``; the tests check it against TensorFlow itself), so a shard holds at
most about ``min_shard_bytes`` only while neither cap binds; once one does, the shards grow. Every worker pulls every weight and pushes a gradient for it through the ps,
4 bytes per float32 each way (q6.3). A ``dataset_fn`` that shards by the worker's index gives each
worker every n-th example from its own (:func:`worker_batches_rule`, ``Dataset.shard``; q6.4 asks
for the TensorFlow code and runs it as a ``dataset_fn`` runs: in a ``tf.function``, the worker's
index a symbolic tensor).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

from ..checks import Function, fmt, integers, judge_number, numbers, question, short


def ps_placement(num_variables: int, num_ps: int) -> list[int]:
    """ParameterServerStrategy without a partitioner: variables go round-robin over the ps tasks,
    in creation order (chapter 06 shows it; tests check it against a real cluster)."""
    return [i % num_ps for i in range(num_variables)]


def num_shards_rule(rows: int, cols: int, min_shard_bytes: int, max_shards: int) -> int:
    """How many shards MinSizePartitioner makes of a (rows, cols) float32 variable: ceil(bytes /
    min_shard_bytes), at least 1, at most max_shards and at most rows (TF's own formula)."""
    return max(1, min(rows, max_shards, math.ceil(rows * cols * 4 / min_shard_bytes)))


# q6.1's model, variables in creation order: Dense(16) on 64 inputs, then Dense(10).
MODEL = [("dense/kernel", (64, 16)), ("dense/bias", (16,)), ("dense_1/kernel", (16, 10)),
         ("dense_1/bias", (10,))]
NUM_PS = 3


def bytes_per_ps(variables=MODEL, num_ps: int = NUM_PS) -> list[int]:
    """The float32 bytes each ps holds when ``variables`` are dealt round-robin."""
    held = [0] * num_ps
    for (_, shape), ps in zip(variables, ps_placement(len(variables), num_ps)):
        held[ps] += 4 * math.prod(shape)
    return held


@question("q6.1", "06_parameter_servers",
          "predict the bytes each of 3 ps holds for the 4 variables of a 64-16-10 model",
          right="4136, 64 and 640 bytes: the variables are dealt one each, ps 0, 1, 2, then ps 0 "
                "again, so ps 0 gets both the big kernel and the last bias; the load follows the "
                "order of creation, not the size.")
def _q6_1(answer):
    got = numbers(answer, "your prediction")
    want = bytes_per_ps()
    if len(got) != NUM_PS:
        return f"give one byte count per ps ({NUM_PS}); you gave {len(got)}."
    if got == [float(w) for w in want]:
        return None
    total = sum(want)
    if all(abs(g - total / NUM_PS) < 1 for g in got):
        return (f"{fmt(total / NUM_PS)} each would be an even spread by size; the strategy deals "
                "whole variables, one per ps in turn, whatever their size.")
    if sum(got) == total // 4:
        return "those count float32 values; each is 4 bytes."
    if sorted(got) == sorted(float(w) for w in want):
        return "the right amounts on the wrong ps: variable i goes to ps i mod 3, in creation order."
    return (f"you predicted {[fmt(g) for g in got]}; deal the 4 variables in creation order to ps "
            "0, 1, 2, 0 and add up 4 bytes per element on each.")


SHARDINGS = ((1000, 8, 16_384, 2), (1000, 8, 8_000, 3), (1000, 8, 40_000, 4), (10, 4, 16, 8),
             (4, 4000, 1000, 8))


@question("q6.2", "06_parameter_servers",
          "write num_shards(rows, cols, min_shard_bytes, max_shards) as MinSizePartitioner does",
          kind=Function("num_shards", SHARDINGS),
          right="your num_shards(…) agrees with TensorFlow's MinSizePartitioner: bytes / "
                "min_shard_bytes shards, rounded up, never more than max_shards, never more than the "
                "variable's rows (it is cut along its first axis), never fewer than 1. So a shard "
                "holds at most about min_shard_bytes only while neither cap binds; once one does, "
                "the shards grow.")
def _q6_2(calls):
    for (rows, cols, min_bytes, most), result in calls:
        want = num_shards_rule(rows, cols, min_bytes, most)
        got = integers([result], calls.shown([rows, cols, min_bytes, most]))[0]
        if got == want:
            continue
        size = rows * cols * 4
        hint = ""
        if got > rows:
            hint = (f" A variable is cut along its first axis, one row at least per shard, so "
                    f"{rows} rows make at most {rows} shards.")
        elif got == max(1, min(rows, most, size // min_bytes)):
            hint = (f" {size} bytes / {min_bytes} = {size / min_bytes:.2f}: TensorFlow rounds UP, "
                    "since the bytes left over still need a shard.")
        elif got == max(1, min(rows, most, math.ceil(rows * cols / min_bytes))):
            hint = " Count bytes, not elements: each float32 element is 4 bytes."
        return (f"num_shards({rows}, {cols}, {min_bytes}, {most}) gave {got}; TensorFlow's "
                f"MinSizePartitioner makes {want}.{hint}")
    return None


@question("q6.3", "06_parameter_servers",
          "bytes through ONE ps per round: 1,000,000 float32 parameters, 4 workers, one step each",
          right="32,000,000 bytes = 2 × 4 bytes × 1,000,000 parameters × 4 workers: every worker "
                "pulls every weight and pushes a gradient for it, all through the one ps link.")
def _q6_3(answer):
    expected = 2 * 4 * 1_000_000 * 4  # (pull + push) × 4 bytes × parameters × workers
    return judge_number(
        answer, "your byte count", expected,
        hints={16e6: "that counts only one direction: each worker pulls the weights AND pushes "
                     "its gradients.",
               8e6: "that is one worker's traffic; all 4 go through the same ps.",
               4e6: "that is one worker's pull alone; count the push and all 4 workers.",
               2e6: "that counts parameters, not bytes: a float32 is 4 bytes.",
               24e6: "that is 3 workers' pull and push, or what all 4 ranks of a ring "
                     "all-reduce send together (2(n−1)/n·S each); here all 4 workers pull and "
                     "push the whole model through the one ps."},
        fallback="count pull + push, 4 bytes per parameter, for every worker.",
        said="you gave {value} bytes: {hint}")


def worker_batches_rule(worker: int, workers: int, examples: int, batch: int) -> list[list[int]]:
    """The batches worker ``worker`` of ``workers`` reads when the examples ``0 … examples − 1`` are
    sharded by worker, then batched: TF's ``Dataset.range(examples).shard(workers, worker)
    .batch(batch)``, the sharding ``experimental_get_current_worker_index()``'s own docstring shows
    (coordinator_context.py; the tests check this rule against tf.data)."""
    mine = list(range(worker, examples, workers))
    return [mine[k:k + batch] for k in range(0, len(mine), batch)]


def _in_dataset_fn(fn):
    """``fn`` called as ``create_per_worker_dataset`` calls a ``dataset_fn``: inside a
    ``tf.function`` traced once (``PerWorkerDatasetFromDatasetFunction.__init__``,
    tensorflow/python/distribute/coordinator/values.py), where the worker's index is a symbolic
    scalar int64 tensor, its value given only when the function runs
    (``experimental_get_current_worker_index``: ``capture_call_time_value(..., TensorSpec([],
    int64))``, coordinator_context.py). Here the index is the traced function's one argument.
    Runs in the student's kernel (the check calls the function there); judges never import
    TensorFlow."""
    import tensorflow as tf

    def call(worker, workers, examples, batch):
        traced = tf.function(lambda index: fn(index, workers, examples, batch),
                             input_signature=[tf.TensorSpec([], tf.int64)])
        return traced(tf.constant(worker, tf.int64))

    return call


def _traced_error(error: str) -> str:
    """A failed call's error as the student needs it: TF's "in user code:" trace ends with the
    error itself (its file paths change from kernel to kernel), then, when a tensor is in the
    way, what the index is."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else error
    if ": " not in last or " " in last.split(": ", 1)[0]:  # not "SomeError: ...": say which
        last = f"{error.split(':', 1)[0]}: {last}"
    if "Tensor" not in error:
        return last
    return (f"{last} (inside a dataset_fn, worker_index is a symbolic tensor: int(), .numpy() or "
            "Python slicing cannot read it; give it to tf.data ops)")


@dataclass(frozen=True)
class DatasetFnFunction(Function):
    """A function called as a ``dataset_fn`` calls it (:func:`_in_dataset_fn`), on every case."""

    def export(self, fn, hidden: list) -> dict:
        if not callable(fn):
            return super().export(fn, hidden)
        data = super().export(_in_dataset_fn(fn), hidden)
        for call in data["calls"]:
            if "error" in call:
                call["error"] = _traced_error(call["error"])
        try:
            data["source"] = inspect.getsource(fn)[:20_000]
        except (TypeError, OSError):
            data["source"] = ""
        return data


WORKER_CASES = ((0, 2, 10, 3), (1, 2, 10, 3), (2, 3, 20, 4), (0, 1, 5, 2))


def _batches(items: list, batch: int) -> list:
    return [items[k:k + batch] for k in range(0, len(items), batch)]


@question("q6.4", "06_parameter_servers",
          "write worker_dataset(worker_index, num_workers, num_examples, batch_size): the "
          "tf.data.Dataset one worker reads, sharded by worker",
          kind=DatasetFnFunction("worker_dataset", WORKER_CASES),
          right="your worker_dataset(…) gives each worker every num_workers-th example from its "
                "own index, in batches: the workers together read every example once, and no "
                "two read the same one.")
def _q6_4(calls):
    for (worker, workers, examples, batch), result in calls:
        shown = calls.shown([worker, workers, examples, batch])
        if not (isinstance(result, dict) and result.get("type") == "Dataset"):
            return (f"{shown} returned {short(result)}; return the tf.data.Dataset itself: "
                    "create_per_worker_dataset needs a dataset_fn that returns one.")
        got = result.get("elements")
        if not result.get("complete", True):
            return (f"{shown} never ends: leave .repeat() to the dataset_fn that calls it, so "
                    "that one pass of it is one pass over the worker's share.")
        want = worker_batches_rule(worker, workers, examples, batch)
        if got == want:
            continue
        mine = list(range(worker, examples, workers))
        size = -(-examples // workers)
        block = list(range(examples))[worker * size:(worker + 1) * size]
        hint = ""
        if got == _batches(list(range(examples)), batch):
            hint = (" Every worker got all the examples, as chapter 06's per-worker dataset did: "
                    "shard them by the worker's index.")
        elif got == _batches(list(range(examples)), batch)[worker::workers]:
            hint = (" You cut batches first, then dealt whole batches to the workers: shard the "
                    "examples, then batch each worker's share.")
        elif got == _batches(block, batch):
            hint = (" That is a block of neighbours; worker i takes examples i, i + n, i + 2n, … "
                    "(what Dataset.shard does).")
        elif got == want[:-1] and len(want[-1]) < batch:
            hint = " The last, shorter batch is missing: keep it (drop_remainder=False)."
        elif got == mine:
            hint = " Those are the right examples, one by one: batch them."
        return f"{shown} gave {short(got)}; worker {worker} of {workers} reads {short(want)}.{hint}"
    return None
