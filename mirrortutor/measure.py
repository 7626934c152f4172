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

import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from . import costmodel
from .devices import _physical_cores
from .errors import InvalidQuantityError, ReplicaCountError, UnknownAlgorithmError
from .mirrored import MirroredStrategy, next_collective_key_base
from .trace import Recording

#: The cross-device implementations TensorFlow offers, by the name used in rows and tables.
#: "default" lets TF choose (collectives: RING on CPUs, NCCL on GPUs, since TF 2.13).
IMPLEMENTATIONS = ("default", "ReductionToOneDevice", "HierarchicalCopyAllReduce", "NcclAllReduce")

#: Which simulator / cost-model algorithm each implementation TF runs corresponds to.
MODEL_ALGORITHM = {"CollectiveAllReduce (RING)": "ring", "CollectiveAllReduce (NCCL)": "ring",
                   "NcclAllReduce": "ring", "ReductionToOneDevice": "reduce_to_one"}

_FALLBACK = (
    "NcclAllReduce needs NVIDIA GPUs: TensorFlow registers its NCCL kernel for device='GPU' "
    "only, so on these {kind} devices it constructs and then fails at the first all-reduce. "
    "Nothing is lost for learning: with no cross_device_ops, MirroredStrategy on CPU devices "
    "uses CollectiveAllReduce with the RING algorithm, the same reduce-scatter + all-gather ring "
    "that NCCL runs on GPUs (and ReductionToOneDevice for int32 values). On a GPU machine "
    "mirrortutor times NCCL itself."
)

_WRONG = (
    "Not timed: the answer is wrong. TF's HierarchicalCopyAllReduce was written for the 8-GPU "
    "DGX-1: it sums two groups of num_devices // 2 replicas, so with an odd replica count the last "
    "replica's values are silently left out. Use it only with an even number of replicas")


@dataclass(frozen=True)
class Measurement:
    """One row of the table: an all-reduce of ``bytes`` per replica, timed here."""

    implementation: str  # what TF ran, as strategy.trace names it, e.g. "CollectiveAllReduce (RING)"
    requested: str  # the cross_device_ops asked for: one of IMPLEMENTATIONS
    replicas: int  # num_replicas_in_sync
    bytes: int  # S: bytes each replica contributes (float32 elements * 4)
    seconds: float  # median time of one all-reduce call
    algbw: float  # bytes / seconds (nccl-tests' algorithm bandwidth), bytes/s
    busbw: float  # algbw * 2(n-1)/n (nccl-tests' bus bandwidth for all-reduce), bytes/s
    device_kind: str  # "CPU" (logical devices sharing cores) or "GPU"
    repeats: int  # timed calls behind the median

    @property
    def elements(self) -> int:
        """float32 elements per replica."""
        return self.bytes // 4


@dataclass(frozen=True)
class Unavailable:
    """An implementation that cannot run on these devices, and why."""

    requested: str  # one of IMPLEMENTATIONS
    replicas: int  # the replica count it was tried with
    reason: str  # TensorFlow's own message (its first lines)
    explanation: str  # the same in plain words, and what TF falls back to


@dataclass(frozen=True)
class LinearFit:
    """``seconds ≈ latency_s + bytes · seconds_per_byte`` for one implementation and replica count,
    and, where a cost model exists, the alpha and beta that make the model match the line."""

    implementation: str  # as in Measurement
    replicas: int  # n
    latency_s: float  # intercept: the time of an empty all-reduce here
    seconds_per_byte: float  # slope
    alpha: float | None  # latency_s / a(n) of the model's algorithm (None: no model)
    beta: float | None  # seconds_per_byte / b(n)
    algorithm: str | None  # the cost-model algorithm used ("ring", "reduce_to_one")

    def interconnect(self) -> costmodel.Interconnect:
        """This fit as a cost-model link, to set "measured here" beside the presets."""
        if self.alpha is None or not self.beta:
            raise InvalidQuantityError(
                f"the fit of {self.implementation} at {self.replicas} replicas has no usable "
                f"beta ({self.beta!r}); expected a positive time per byte. Measure larger sizes, "
                "where time grows with the message.")
        return costmodel.Interconnect(
            f"measured here ({self.implementation}, {self.replicas} replicas)",
            1.0 / self.beta, max(self.alpha, 0.0),
            f"least-squares fit of all-reduce times measured on this machine ({_where()}); "
            f"not a GPU link")


@dataclass
class AllReduceTimings:
    """What :func:`time_allreduce` measured: rows, what could not run, and a printable table."""

    rows: list[Measurement]  # one per implementation x replicas x size
    unavailable: list[Unavailable] = field(default_factory=list)
    device_kind: str = "CPU"  # "CPU" or "GPU"

    @property
    def note(self) -> str:
        """Where the numbers come from, to print beside any chart of them."""
        return _where() if self.device_kind == "CPU" else "measured on this machine's GPUs"

    def implementations(self) -> list[str]:
        """The implementation names TF ran, in measuring order."""
        return list(dict.fromkeys(r.implementation for r in self.rows))

    def select(self, implementation: str | None = None, replicas: int | None = None
               ) -> list[Measurement]:
        """The rows of one implementation and/or one replica count, by size."""
        return sorted((r for r in self.rows
                       if implementation in (None, r.implementation, r.requested)
                       and replicas in (None, r.replicas)), key=lambda r: (r.replicas, r.bytes))

    def fit(self, implementation: str, replicas: int) -> LinearFit:
        """Least-squares line through one implementation's times at one replica count."""
        rows = self.select(implementation, replicas)
        if len(rows) < 2:
            raise InvalidQuantityError(
                f"{len(rows)} measured size(s) for {implementation!r} at {replicas} replicas; "
                "a line needs at least 2. Measure more sizes, or pick one of "
                f"{self.implementations()} with replicas in {sorted({r.replicas for r in self.rows})}.")
        x = np.array([r.bytes for r in rows], dtype=np.float64)
        y = np.array([r.seconds for r in rows], dtype=np.float64)
        slope, intercept = np.polyfit(x, y, 1)
        if intercept < 0:  # times are positive: refit through the origin rather than report < 0
            slope, intercept = float(x @ y / (x @ x)), 0.0
        slope = max(float(slope), 0.0)
        name = rows[0].implementation
        algorithm = MODEL_ALGORITHM.get(name)
        alpha = beta = None
        if algorithm is not None:
            a, b, _ = costmodel.cost_coefficients(algorithm, replicas)
            alpha, beta = float(intercept) / a, slope / b
        return LinearFit(name, replicas, float(intercept), slope, alpha, beta, algorithm)

    def model_fit(self, implementation: str) -> costmodel.Interconnect:
        """One alpha and one beta for all replica counts at once (least squares on
        ``t = a(n)·alpha + b(n)·S·beta``), as a cost-model link: does the model's dependence on
        ``n`` explain what was measured here?"""
        rows = self.select(implementation)
        algorithm = MODEL_ALGORITHM.get(rows[0].implementation) if rows else None
        if algorithm is None or len({(r.replicas, r.bytes) for r in rows}) < 2:
            raise InvalidQuantityError(
                f"cannot fit the cost model to {implementation!r}: {len(rows)} row(s), model "
                f"{algorithm!r}; expected an implementation with a model ({list(MODEL_ALGORITHM)}) "
                "measured at 2 or more sizes.")
        coef = [costmodel.cost_coefficients(algorithm, r.replicas) for r in rows]
        x = np.array([[a, b * r.bytes] for (a, b, _), r in zip(coef, rows)], dtype=np.float64)
        y = np.array([r.seconds for r in rows], dtype=np.float64)
        scale = x.max(axis=0)  # columns differ by ~1e6: scale for a well-conditioned solve
        (alpha, beta), *_ = np.linalg.lstsq(x / scale, y, rcond=None)
        alpha, beta = alpha / scale[0], beta / scale[1]
        if alpha < 0 or beta <= 0:  # keep times positive: drop the offending term and refit
            col = 1 if alpha < 0 else 0
            only = float(x[:, col] @ y / (x[:, col] @ x[:, col]))
            alpha, beta = (0.0, only) if col == 1 else (only, 1e-30)
        return costmodel.Interconnect(
            f"measured here: {rows[0].implementation}", 1.0 / beta, float(alpha),
            f"least-squares fit of t = a(n)·alpha + b(n)·S·beta ({algorithm}) to {len(rows)} "
            f"times measured on this machine ({self.note})")

    def table(self) -> str:
        """nccl-tests-style text: one block per implementation and replica count."""
        lines = [f"# all-reduce (SUM, float32) timed with TensorFlow {tf.__version__}; "
                 f"{self.note}", "# time: median of one all-reduce call (tf.function), "
                 "algbw = size/time, busbw = algbw*2(n-1)/n"]
        for impl in self.implementations():
            for n in sorted({r.replicas for r in self.rows if r.implementation == impl}):
                rows = self.select(impl, n)
                lines += ["#", f"# {impl}, {n} replicas on {rows[0].device_kind}",
                          f"# {'size':>10} {'count':>10} {'type':>7} {'redop':>5} "
                          f"{'time':>9} {'algbw':>7} {'busbw':>7}",
                          f"# {'(B)':>10} {'(elements)':>10} {'':>7} {'':>5} "
                          f"{'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7}"]
                lines += [f"  {r.bytes:>10d} {r.elements:>10d} {'float':>7} {'sum':>5} "
                          f"{r.seconds * 1e6:>9.1f} {r.algbw / 1e9:>7.3f} {r.busbw / 1e9:>7.3f}"
                          for r in rows]
        for u in self.unavailable:
            said = "checked" if u.reason.startswith("wrong result") else "TensorFlow says"
            lines += ["#", f"# {u.requested}: unavailable here ({u.replicas} replicas tried).",
                      f"#   {said}: {u.reason}", f"#   {u.explanation}"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _where() -> str:
    return (f"logical CPU devices sharing {_physical_cores()} physical core(s): "
            "TF's code paths compared here, not GPU speed")


def _cross_device_ops(requested: str):
    if requested == "default":
        return None
    return getattr(tf.distribute, requested)()


def _plain_strategy(devices, cross_device_ops) -> tf.distribute.MirroredStrategy:
    """TF's own strategy with fresh collective keys, so replica counts can share the process."""
    tf.distribute.MirroredStrategy._collective_key_base = next_collective_key_base()
    try:
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device_ops)
    finally:
        tf.distribute.MirroredStrategy._collective_key_base = 0


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
    strategy = MirroredStrategy(devices, cross_device_ops=_cross_device_ops(requested),
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
        if isinstance(n, bool) or not 1 <= n <= len(devices):
            raise ReplicaCountError(f"{n} replicas asked for, but {len(devices)} devices were "
                                    f"given; expected 1..{len(devices)}. Pass more devices from "
                                    f"mt.setup, or fewer replicas.")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 4 or s % 4:
            raise InvalidQuantityError(f"size {s!r} bytes cannot hold whole float32 elements; "
                                       "expected a positive multiple of 4, e.g. 4096.")
    for name in implementations:
        if name not in IMPLEMENTATIONS:
            raise UnknownAlgorithmError(f"unknown implementation {name!r}; expected one of "
                                        f"{IMPLEMENTATIONS} (TF's cross_device_ops class names).")
    if repeats < 1 or warmup < 0:
        raise InvalidQuantityError(f"repeats={repeats!r}, warmup={warmup!r}; expected "
                                   "repeats >= 1 and warmup >= 0.")
    kind = "GPU" if "GPU" in devices[0].upper() else "CPU"
    result = AllReduceTimings([], [], kind)
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
            strategy = _plain_strategy(devices[:n], _cross_device_ops(requested))
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
    def once() -> float:
        start = time.perf_counter()
        out = step(values)
        for t in strategy.experimental_local_results(out):  # wait for every replica's result
            t.numpy()
        return time.perf_counter() - start

    for _ in range(warmup + 1):  # the first call also traces the function
        once()
    return statistics.median(once() for _ in range(repeats))


__all__ = ["AllReduceTimings", "IMPLEMENTATIONS", "LinearFit", "MODEL_ALGORITHM", "Measurement",
           "Unavailable", "time_allreduce"]
