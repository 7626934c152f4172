"""What :func:`mirrortutor.measure.time_allreduce` measured: plain records, fits and a table.

Numpy only, so the rows can be read, fitted and plotted without TensorFlow. Rows follow
nccl-tests (size, time, algbw, busbw; nccl-tests ``doc/PERFORMANCE.md``). Every figure here was
measured on this machine: on logical CPU devices the replicas share the physical cores, so the
numbers say how TensorFlow's code paths compare *here*, never how fast GPUs or their links would be.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidQuantityError
from ..timing import measured_here
from . import costmodel

__all__ = ["AllReduceTimings", "LinearFit", "Measurement", "Unavailable"]


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
            f"least-squares fit of all-reduce times {measured_here()}; "
            f"not a GPU link")


@dataclass
class AllReduceTimings:
    """What :func:`time_allreduce` measured: rows, what could not run, and a printable table."""

    rows: list[Measurement]  # one per implementation x replicas x size
    unavailable: list[Unavailable] = field(default_factory=list)
    device_kind: str = "CPU"  # "CPU" or "GPU"
    tensorflow_version: str = ""  # the TensorFlow that ran them (printed in the table's header)

    @property
    def note(self) -> str:
        """Where the numbers come from, to print beside any chart of them."""
        return measured_here(self.device_kind)

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
        algorithm = costmodel.algorithm_for(name)
        alpha = beta = None
        if algorithm is not None:
            a, b, _ = costmodel.cost_coefficients(algorithm, replicas)
            alpha, beta = float(intercept) / a, slope / b
        return LinearFit(name, replicas, float(intercept), slope, alpha, beta, algorithm)

    def model_fit(self, implementation: str) -> costmodel.Interconnect:
        """One alpha and one beta for all replica counts at once (least squares on
        ``t = a(n)·alpha + b(n)·S·beta``), as a cost-model link: does the model's dependence on
        ``n`` explain what was measured here? The model has no constant term, so ``alpha`` also
        takes up any fixed cost per call (dispatch, reading the result back). When the times do
        not grow with size, the fitted beta is <= 0: the bandwidth term is dropped, and the link
        says so (``per_byte_cost_measured`` is False, its source text too) rather than report a
        made-up bandwidth."""
        rows = self.select(implementation)
        algorithm = costmodel.algorithm_for(rows[0].implementation) if rows else None
        if algorithm is None or len({(r.replicas, r.bytes) for r in rows}) < 2:
            raise InvalidQuantityError(
                f"cannot fit the cost model to {implementation!r}: {len(rows)} row(s), model "
                f"{algorithm!r}; expected an implementation with a model ({list(costmodel.IMPLEMENTATION_ALGORITHM)}) "
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
            alpha, beta = (0.0, only) if col == 1 else (only, 1.0 / costmodel.UNMEASURED_BANDWIDTH)
        dropped = ("; no per-byte cost measurable: the fitted beta was <= 0, so the bandwidth "
                   "term was dropped" if beta * costmodel.UNMEASURED_BANDWIDTH <= 1.0 else "")
        return costmodel.Interconnect(
            f"measured here: {rows[0].implementation}", 1.0 / beta, float(alpha),
            f"least-squares fit of t = a(n)·alpha + b(n)·S·beta ({algorithm}) to {len(rows)} "
            f"times measured on this machine ({self.note}){dropped}")

    def table(self) -> str:
        """nccl-tests-style text: one block per implementation and replica count."""
        lines = [f"# all-reduce (SUM, float32) timed with TensorFlow {self.tensorflow_version}; "
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
