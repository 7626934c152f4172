"""How long should an all-reduce take? The alpha-beta-gamma model, and what it means for a step.

The model (Hockney's, as used by Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005) prices every algorithm as

    T = a(n)·alpha + b(n)·S·beta + c(n)·S·gamma

with ``alpha`` the latency of one message step (s), ``beta`` the time per byte on a link (s/B,
one over the bandwidth), ``gamma`` the time per byte of the reduction arithmetic (s/B) and ``S``
the bytes each rank contributes. :func:`cost_coefficients` returns ``(a, b, c)``:

- ``ring``: ``2(n-1)``, ``2(n-1)/n``, ``(n-1)/n`` (Patarasuk & Yuan, "Bandwidth optimal all-reduce
  algorithms for clusters of workstations", JPDC 69(2), 2009; NCCL's ring).
- ``halving_doubling`` (Rabenseifner), ``n`` a power of two: ``2·log2 n``, ``2(n-1)/n``,
  ``(n-1)/n`` (Thakur et al. 2005; MPICH ``allreduce.c`` comment). Otherwise, with ``p`` the
  largest power of two below ``n``: ``2·log2 p + 2``, ``2(p-1)/p + 2``, ``(p-1)/p + 1``: the fold
  step moves and adds a whole tensor, the unfold step moves it back (MPICH's non-power-of-two
  comment writes the same, with ``p`` where we write the power of two actually used).
- ``reduce_to_one`` (flat gather to a root, add there, flat broadcast: TF's
  ``ReductionToOneDevice``): ``2(n-1)``, ``2(n-1)``, ``n-1``. Our convention: the root has one
  link (the one-port model), so its ``n-1`` incoming and ``n-1`` outgoing whole-tensor messages
  take turns, each paying ``alpha + S·beta``, and it does all ``n-1`` additions itself.

Bandwidths are **per direction** (what one GPU or port can send while it receives as much),
because in every algorithm above each rank sends and receives at once; ``beta = 1/bandwidth``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

from ..errors import UnknownPresetError
from ..validate import quantity
from .compute import GPUS, GpuModel, gpu
from .links import LINKS, MEASURED
from .simulator import check_algorithm, check_num_ranks


#: The bandwidth (bytes/s) a fitted link reports when the fit found no per-byte cost (its least-
#: squares beta came out <= 0, so the term was dropped): beta = 1/this is 0 to float precision.
#: :attr:`Interconnect.per_byte_cost_measured` tells such a link from a real one.
UNMEASURED_BANDWIDTH = 1e30


@dataclass(frozen=True)
class Interconnect:
    """A link between replicas, reduced to the two numbers the model needs.

    ``bandwidth_bytes_per_s`` is the link's theoretical peak per direction (a datasheet's number);
    ``measured_busbw`` what nccl-tests reached on a real 8-GPU system of that kind, where a public
    measurement exists (:mod:`~mirrortutor.collectives.links`). :meth:`achieved` prices with it.
    """

    name: str  # preset key, e.g. "nvlink3-a100"
    bandwidth_bytes_per_s: float  # theoretical peak, per direction, per GPU or port; beta = 1 / this
    latency_s: float  # alpha: fixed cost of one message step, an assumption (see source)
    source: str  # where the bandwidth and the latency come from
    measured_busbw: float | None = None  # bytes/s nccl-tests reached on real hardware, or None
    measured_source: str = ""  # which measurement

    def achieved(self) -> "Interconnect":
        """The same link at the bus bandwidth real rings reached (peak if none is known)."""
        if self.measured_busbw is None:
            return self
        return Interconnect(f"{self.name} (measured)", self.measured_busbw, self.latency_s,
                            f"bandwidth: {self.measured_source}; {self.source.split('; ', 1)[-1]}",
                            self.measured_busbw, self.measured_source)

    def __post_init__(self) -> None:
        quantity("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, positive=True)
        quantity("latency_s", self.latency_s)

    @property
    def per_byte_cost_measured(self) -> bool:
        """False for a fitted link whose per-byte term could not be measured (see
        :data:`UNMEASURED_BANDWIDTH`): its bandwidth is a placeholder, not a measurement."""
        return self.bandwidth_bytes_per_s < UNMEASURED_BANDWIDTH

    @property
    def alpha(self) -> float:
        """Latency per message step, in seconds."""
        return self.latency_s

    @property
    def beta(self) -> float:
        """Seconds per byte: one over the per-direction bandwidth."""
        return 1.0 / self.bandwidth_bytes_per_s

    def allreduce_time(self, algorithm: str, num_replicas: int, nbytes: float,
                       gamma: float = 0.0) -> float:
        """Predicted seconds for one all-reduce of ``nbytes`` per replica over this link."""
        return allreduce_time(algorithm, num_replicas, nbytes, alpha=self.alpha, beta=self.beta,
                              gamma=gamma)


PRESETS: dict[str, Interconnect] = {
    name: Interconnect(name, value * 1e9 / (8 if unit == "Gb/s" else 1), alpha,
                       "bandwidth: " + source, *MEASURED.get(name, (None, "")))
    for name, (value, unit, alpha, source) in LINKS.items()}


def preset_names() -> list[str]:
    """The names :func:`preset` accepts, slowest link family first."""
    return list(PRESETS)


def preset(name: str) -> Interconnect:
    """The :class:`Interconnect` called ``name`` (case-insensitive), e.g. ``preset("ib-hdr")``."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in PRESETS:
        raise UnknownPresetError(f"no interconnect preset called {name!r}; expected one of "
                                 f"{preset_names()}. Or build your own: Interconnect(name, "
                                 f"bandwidth_bytes_per_s, latency_s, source).")
    return PRESETS[key]


def cost_coefficients(algorithm: str, num_replicas: int) -> tuple[float, float, float]:
    """``(a, b, c)`` such that ``T = a·alpha + b·S·beta + c·S·gamma`` (module docstring)."""
    check_algorithm(algorithm)
    check_num_ranks(num_replicas)
    n = int(num_replicas)
    if algorithm == "ring":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n, (n - 1) / n
    if algorithm == "reduce_to_one":
        return 2.0 * (n - 1), 2.0 * (n - 1), float(n - 1)
    p = 1 << (n.bit_length() - 1)  # largest power of two <= n
    fold = 1.0 if n != p else 0.0  # one fold step plus one unfold step when n is not a power of 2
    return 2.0 * math.log2(p) + 2 * fold, 2.0 * (p - 1) / p + 2 * fold, (p - 1) / p + fold


def allreduce_time(algorithm: str, num_replicas: int, nbytes: float, *, alpha: float,
                   beta: float, gamma: float = 0.0) -> float:
    """Predicted seconds for one all-reduce of ``nbytes`` per replica; 0 for one replica."""
    a, b, c = cost_coefficients(algorithm, num_replicas)
    s = quantity("nbytes", nbytes)
    for name, value in (("alpha", alpha), ("beta", beta), ("gamma", gamma)):
        quantity(name, value)
    return a * alpha + b * s * beta + c * s * gamma


def crossover_bytes(algorithm_a: str, algorithm_b: str, num_replicas: int, *, alpha: float,
                    beta: float, gamma: float = 0.0) -> float | None:
    """Message size at which the two algorithms take equally long, or None if they never swap.

    Both times are straight lines in ``S``, so they cross at most once. Below the crossover the
    one with fewer latency terms wins, above it the one with fewer bandwidth terms.
    """
    for name, value in (("alpha", alpha), ("beta", beta), ("gamma", gamma)):
        quantity(name, value)
    a1, b1, c1 = cost_coefficients(algorithm_a, num_replicas)
    a2, b2, c2 = cost_coefficients(algorithm_b, num_replicas)
    slope_gap = (b1 - b2) * beta + (c1 - c2) * gamma
    if slope_gap == 0:
        return None
    s = (a2 - a1) * alpha / slope_gap
    return s if s > 0 else None


def algbw(nbytes: float, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth ``S / t`` in bytes/s (nccl-tests doc/PERFORMANCE.md)."""
    return quantity("nbytes", nbytes) / quantity("seconds", seconds, positive=True)


def busbw(nbytes: float, seconds: float, num_replicas: int) -> float:
    """nccl-tests' bus bandwidth for all-reduce, ``algbw · 2(n-1)/n``: comparable to link speed.

    A perfect ring reaches ``busbw == bandwidth_bytes_per_s`` for large messages, whatever ``n``.
    """
    check_num_ranks(num_replicas)
    return algbw(nbytes, seconds) * 2 * (num_replicas - 1) / num_replicas


@dataclass(frozen=True)
class StepEstimate:
    """Is MirroredStrategy using my GPUs effectively? One training step, predicted."""

    interconnect: str  # preset or custom Interconnect name
    algorithm: str  # all-reduce algorithm priced
    num_replicas: int  # num_replicas_in_sync
    gradient_bytes: float  # S: num_parameters * bytes_per_parameter, all-reduced as one pack
    compute_s: float  # forward + backward on per_replica_batch_size, per replica
    allreduce_s: float  # predicted all-reduce time
    step_s: float  # compute + all-reduce, or the larger of the two with overlap
    comm_share: float  # share of the step spent waiting for communication (exposed, 0..1)
    speedup: float  # throughput vs one replica at the same per_replica_batch_size
    scaling_efficiency: float  # speedup / num_replicas; 1.0 is perfect linear scaling
    overlap: bool  # True: communication fully hidden behind compute where possible


def estimate_step(num_parameters: float, compute_s: float, num_replicas: int,
                  interconnect: Interconnect | str, *, algorithm: str = "ring",
                  bytes_per_parameter: float = 4, overlap: bool = False,
                  gamma: float = 0.0) -> StepEstimate:
    """Predict one synchronous data-parallel step: compute, then all-reduce every gradient.

    Assumes the gradients travel as one pack (TF's ``NcclAllReduce`` default ``num_packs=1``) and,
    by default, that the all-reduce starts only after the backward pass (``overlap=False``:
    ``step = compute + allreduce``). ``overlap=True`` is the best case, ``max(compute, allreduce)``.
    ``bytes_per_parameter=4`` is float32; use 2 for float16/bfloat16 gradients.
    """
    ic = preset(interconnect) if isinstance(interconnect, str) else interconnect
    quantity("num_parameters", num_parameters)
    quantity("compute_s", compute_s)
    quantity("bytes_per_parameter", bytes_per_parameter)
    nbytes = float(num_parameters) * bytes_per_parameter
    comm = ic.allreduce_time(algorithm, num_replicas, nbytes, gamma=gamma)
    step = max(compute_s, comm) if overlap else compute_s + comm
    exposed = step - compute_s
    efficiency = compute_s / step if step > 0 else 1.0
    return StepEstimate(ic.name, algorithm, int(num_replicas), nbytes, float(compute_s), comm,
                        step, exposed / step if step > 0 else 0.0, num_replicas * efficiency,
                        efficiency, overlap)


def estimate_grid(num_parameters: float, compute_s: float, replicas: Iterable[int] = range(1, 9),
          interconnects: Iterable[Interconnect | str] | None = None, *, algorithm: str = "ring",
          bytes_per_parameter: float = 4, overlap: bool = False) -> list[dict]:
    """:func:`estimate_step` for every replica count × interconnect, as plain rows for plotting.

    (Not to be confused with chapter 05's program, which *runs* training at several replica
    counts: this only evaluates the model.)"""
    links = list(PRESETS.values()) if interconnects is None else list(interconnects)
    return [asdict(estimate_step(num_parameters, compute_s, n, ic, algorithm=algorithm,
                                 bytes_per_parameter=bytes_per_parameter, overlap=overlap))
            for ic in links for n in replicas]


#: Which simulator / cost-model algorithm each implementation TensorFlow runs corresponds to, by
#: the name ``strategy.trace`` gives it. NCCL's all-reduce is a ring (bandwidth-optimal for large
#: messages; NCCL also has trees, which this model does not price).
IMPLEMENTATION_ALGORITHM = {"CollectiveAllReduce (RING)": "ring",
                            "CollectiveAllReduce (NCCL)": "ring", "NcclAllReduce": "ring",
                            "ReductionToOneDevice": "reduce_to_one"}


def algorithm_for(implementation: str) -> str | None:
    """The cost-model algorithm of a TensorFlow implementation name, or None when none fits
    (HierarchicalCopyAllReduce, CollectiveAllReduce (AUTO))."""
    return IMPLEMENTATION_ALGORITHM.get(implementation)


__all__ = ["GPUS", "GpuModel", "IMPLEMENTATION_ALGORITHM", "Interconnect", "PRESETS", "StepEstimate", "algbw",
           "algorithm_for", "allreduce_time", "busbw", "cost_coefficients", "crossover_bytes",
           "estimate_grid", "estimate_step", "gpu", "preset", "preset_names"]
