"""All-reduce timed on the machine at hand: TensorFlow's real cross-device implementations.

:func:`time_allreduce` runs ``tf.distribute.get_replica_context().all_reduce("SUM", x)`` inside
``strategy.run`` in a ``tf.function``, over real ``tf.distribute.MirroredStrategy`` instances built
with ``cross_device_ops=`` each implementation, for several replica counts and message sizes, and
returns nccl-tests-style rows (size, time, algbw, busbw; nccl-tests ``doc/PERFORMANCE.md``).

What is measured: one call of a ``tf.function`` holding one all-reduce of ``S`` bytes per replica
(float32), median of ``repeats`` calls after a warm-up; the call returns one element of each
replica's result, so the time covers the whole all-reduce and the function-call overhead (which
shows up as latency). Plain TF strategies are timed (no recording in the graph); one untimed
``mt.MirroredStrategy`` call per configuration first checks the sum and reads, from
``strategy.trace``, which implementation TensorFlow really ran.

On logical CPU devices the replicas share the machine's physical cores: these numbers say how
TensorFlow's code paths compare *here*, never how fast GPUs or their links would be.

``NcclAllReduce`` needs NVIDIA GPUs. On a CPU-only machine it is reported as unavailable, with
TensorFlow's own reason and the fallback in plain words, instead of failing.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..errors import InvalidQuantityError, ReplicaCountError
from ..record.crossdevice import IMPLEMENTATIONS, cross_device_ops
from ..record.mirrored import MirroredStrategy
from ..record.records import Recording
from ..record.tf_internals.hooks import own_collective_keys, plain_mirrored_strategy
from ..timing import median_seconds
from ..validate import is_whole
from . import costmodel
from .timings import AllReduceTimings, LinearFit, Measurement, Unavailable

#: Which simulator / cost-model algorithm each implementation TF runs corresponds to.
MODEL_ALGORITHM = costmodel.IMPLEMENTATION_ALGORITHM

_FALLBACK = (
    "NcclAllReduce needs NVIDIA GPUs: TensorFlow registers its NCCL kernel for device='GPU' "
    "only, so on these {kind} devices it constructs and then fails at the first all-reduce. "
    "Nothing is lost for learning: with no cross_device_ops, MirroredStrategy on CPU devices "
    "uses CollectiveAllReduce with the RING algorithm for its all-reduces in a step (a "
    "reduce-scatter + all-gather ring, one of the algorithms NCCL runs on GPUs), and "
    "ReductionToOneDevice for int32 values and for reduces to a CPU destination (strategy.reduce, "
    "metric reads, SUM/MEAN variable writes). On a GPU machine mirrortutor times NCCL itself."
)

_WRONG = (
    "Not timed: the answer is wrong. TF's HierarchicalCopyAllReduce was written for the 8-GPU "
    "DGX-1: it sums two groups of num_devices // 2 replicas, so with an odd replica count the last "
    "replica's values are silently left out. Use it only with an even number of replicas")


def _per_replica(strategy, elements: int):
    """Replica r holds r+1 in every element: the sum is n(n+1)/2 everywhere."""
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.fill([elements], tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32)))


def _allreduce_fn(strategy):
    def replica_fn(x):
        return tf.distribute.get_replica_context().all_reduce("SUM", x)[:1]

    return tf.function(lambda v: strategy.run(replica_fn, args=(v,)), autograph=False)


def _first_lines(message: str, lines: int = 4) -> str:
    kept = [ln.strip() for ln in str(message).strip().splitlines() if ln.strip()][:lines]
    return " ".join(kept)


def _probe(devices, requested: str):
    """One untimed, recorded all-reduce: which implementation ran, or why none could.

    Returns ``(implementation name, None)`` or ``(None, TensorFlow's reason)``. Eager, so that
    NCCL on CPU fails the way a student meets it (its tf.function error is about device placement).
    """
    n = len(devices)
    with own_collective_keys():  # mirrortutor's own strategy: never the student's group keys
        strategy = MirroredStrategy(devices, cross_device_ops=cross_device_ops(requested),
                                    recording=Recording(full_values=True))
    values = _per_replica(strategy, 8)
    try:
        out = strategy.run(lambda x: tf.distribute.get_replica_context().all_reduce("SUM", x),
                           args=(values,))
    except (tf.errors.OpError, ValueError, RuntimeError) as exc:
        return None, _first_lines(getattr(exc, "message", None) or exc)
    got = [float(np.asarray(t)[0]) for t in strategy.experimental_local_results(out)]
    expected = n * (n + 1) / 2
    if any(g != expected for g in got):  # a wrong sum is not worth timing
        return None, (f"wrong result: replica r sent r+1, so every replica should get "
                      f"{expected:g}, but got {sorted(set(got))}")
    (record,) = strategy.trace.allreduces(path="batch_reduce")
    return record.implementation, None


def time_allreduce(devices, implementations=("default", "ReductionToOneDevice",
                                             "HierarchicalCopyAllReduce", "NcclAllReduce"),
                   replicas=(2, 4, 8), sizes=(4096, 65536, 1 << 20), *, repeats: int = 10,
                   warmup: int = 2) -> AllReduceTimings:
    """Time each cross-device implementation on the first ``n`` of ``devices`` for each ``n`` in
    ``replicas`` and each size in ``sizes`` (bytes per replica, multiples of 4: float32).

    Implementations that cannot run here (NcclAllReduce without GPUs) become
    :class:`Unavailable` entries with TF's reason; the others become :class:`Measurement` rows.
    """
    devices = list(devices)
    replicas = [int(n) for n in replicas]
    for n in replicas:
        if not is_whole(n) or not 1 <= n <= len(devices):
            raise ReplicaCountError(f"{n} replicas asked for, but {len(devices)} devices were "
                                    f"given; expected 1..{len(devices)}. Pass more devices from "
                                    f"mt.setup, or fewer replicas.")
    for s in sizes:
        if not is_whole(s) or s < 4 or s % 4:
            raise InvalidQuantityError(f"size {s!r} bytes cannot hold whole float32 elements; "
                                       "expected a positive multiple of 4, e.g. 4096.")
    for name in implementations:
        cross_device_ops(name)  # an unknown name: UnknownAlgorithmError with the names
    if repeats < 1 or warmup < 0:
        raise InvalidQuantityError(f"repeats={repeats!r}, warmup={warmup!r}; expected "
                                   "repeats >= 1 and warmup >= 0.")
    kind = "GPU" if "GPU" in devices[0].upper() else "CPU"
    result = AllReduceTimings([], [], kind, tf.__version__)
    for requested in implementations:
        for n in replicas:
            implementation, reason = _probe(devices[:n], requested)
            if reason is not None and reason.startswith("wrong result"):
                why = _WRONG if requested == "HierarchicalCopyAllReduce" else _WRONG.split(".")[0]
                result.unavailable.append(Unavailable(requested, n, reason, why + "."))
                continue  # other replica counts may work (even ones do)
            if reason is not None:
                result.unavailable.append(Unavailable(requested, n, reason,
                                                      _FALLBACK.format(kind=kind)))
                break  # the same reason holds for every replica count
            strategy = plain_mirrored_strategy(devices[:n], cross_device_ops(requested))
            step = _allreduce_fn(strategy)
            for nbytes in sizes:
                values = _per_replica(strategy, int(nbytes) // 4)
                seconds = _median_seconds(strategy, step, values, repeats, warmup)
                result.rows.append(Measurement(
                    implementation, requested, n, int(nbytes), seconds,
                    costmodel.algbw(nbytes, seconds), costmodel.busbw(nbytes, seconds, n),
                    kind, repeats))
    return result


def _median_seconds(strategy, step, values, repeats: int, warmup: int) -> float:
    def once() -> None:
        out = step(values)
        for t in strategy.experimental_local_results(out):  # wait for every replica's result
            t.numpy()

    return median_seconds(once, repeats, warmup=warmup + 1)  # the first call also traces


__all__ = ["AllReduceTimings", "IMPLEMENTATIONS", "LinearFit", "MODEL_ALGORITHM", "Measurement",
           "Unavailable", "time_allreduce"]
