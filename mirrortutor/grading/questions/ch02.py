"""Chapter 02 · Replicas and shards: how a global batch is cut into per-replica batches.

The rule taught, :func:`tf_split`: with one worker and the default auto-shard policy (AUTO, which for
in-memory data finds no file reader and falls back to DATA, whose rewrite swaps in the legacy
``RebatchDataset``: ``_AutoShardDataset``,
tensorflow/python/data/experimental/ops/distribute.py), ``experimental_distribute_dataset`` gives the first replicas
``ceil(global_batch_size / num_replicas)`` examples each and the next ones what is left (58 over
4: 15, 15, 15, 13), so the last replicas may get smaller or empty shards; a dataset read from
files, or the policy OFF, is cut by ``batch_sizes_for_worker`` instead. The chapter prints two
uneven cuts of data in memory (58 over 4: 15, 15, 15, 13; 64 over 3: 22, 22, 20) and no empty
shard: q2.1 asks the student to find the rest of the rule by observing the strategy. q2.2 applies
the chapter's rule for Keras 3.15's ``fit`` (it reduces its *first* batch with
``axis=None``, so that batch must split evenly) to cases the chapter did not run. The tests check
:func:`tf_split` against the real strategy, and :func:`fit_trains` against real ``fit`` runs.
"""

from __future__ import annotations

import math

from ..checks import Function, disagreements, integers, question

def tf_split(global_batch_size: int, num_replicas: int) -> list[int]:
    """How ``experimental_distribute_dataset`` cuts one batch of data held in memory, one worker,
    policy AUTO: ceil(B/n) each, then the rest."""
    per = math.ceil(global_batch_size / num_replicas)
    return [max(0, min(per, global_batch_size - per * r)) for r in range(num_replicas)]


# Public cases; the key adds hidden ones (its check cell's metadata), which students never see.
SPLIT_CASES = ((64, 4), (58, 4), (50, 4), (13, 4), (5, 4), (58, 3), (13, 8), (7, 1))


@question("q2.1", "02_replicas_and_shards",
          "write split_sizes(global_batch_size, num_replicas): each replica's per-replica batch",
          right="your split_sizes cuts every batch as TensorFlow does with one worker, the "
                "default auto-shard policy AUTO and a dataset held in memory (no file reader, so "
                "AUTO falls back to DATA): ceil(B / n) examples for the first replicas, the rest "
                "for the next, then empty shards (58 over 4: 15, 15, 15, 13).",
          kind=Function("split_sizes", SPLIT_CASES))
def _q2_1(calls):
    for (g, n), got, want in disagreements(calls, tf_split):
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


# q2.2: which global batch sizes let Keras fit start, for 249 examples on 3 replicas.
FIT_EXAMPLES, FIT_REPLICAS = 249, 3
FIT_CHOICES = (60, 64, 66, 100, 256)


def fit_trains(global_batch_size: int, examples: int = FIT_EXAMPLES,
               replicas: int = FIT_REPLICAS) -> bool:
    """Keras 3.15's fit builds the model from strategy.reduce("MEAN", first batch, axis=None)
    (TensorFlowTrainer._maybe_symbolic_build), which needs the first batch's shards equal."""
    first = min(global_batch_size, examples)  # a batch larger than the data holds all of it
    return len(set(tf_split(first, replicas))) == 1


@question("q2.2", "02_replicas_and_shards",
          "for 249 examples on 3 replicas, list the global batch sizes of 60, 64, 66, 100, 256 "
          "with which Keras fit trains",
          right="60, 66 and 256: fit needs only the first batch of the call to split evenly over "
                "the 3 replicas (the first batch of evaluate and of validation_data too). 256 is "
                "more than the data holds: its one batch is all 249 examples, cut 83, 83, 83. "
                "64 and 100 make first batches cut 22, 22, 20 and 34, 34, 32.")
def _q2_2(answer):
    want = sorted(b for b in FIT_CHOICES if fit_trains(b))  # [60, 66, 256]
    got = sorted(set(integers(answer, "the batch sizes that train")))
    if got == want:
        return None
    if not set(got) <= set(FIT_CHOICES):
        return f"choose among {list(FIT_CHOICES)}; you listed {got}."
    wrong = [b for b in got if not fit_trains(b)]
    if wrong:
        b = wrong[0]
        return (f"a global batch of {b} makes a first batch cut {tf_split(min(b, FIT_EXAMPLES), 3)}, "
                "and fit reduces its first batch element by element.")
    if 256 not in got:
        return (f"256 trains, though it is no multiple of 3: with {FIT_EXAMPLES} examples its first (and only) batch holds all "
                f"{FIT_EXAMPLES}, cut {tf_split(FIT_EXAMPLES, 3)}. What fit reduces is the first "
                "batch it gets, not a full one.")
    missing = [b for b in want if b not in got][0]
    return (f"{missing} trains: its first batch splits {tf_split(missing, 3)}, and fit reduces "
            "only the first batch of the call that way.")
