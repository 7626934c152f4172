"""The records a trace is made of: plain dataclasses of numpy arrays, and the recording policy.

Each record says what one instrumented strategy saw at one place TensorFlow routes through: a
variable's copies, a replica's shard of the batch, an all-reduce's inputs and outputs, what a
replica returned, whether the copies still agree. :class:`~mirrortutor.record.trace.Trace` groups
them by step. Nothing here imports TensorFlow: a trace can be read (and plotted) anywhere.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

@dataclass(frozen=True)
class Recording:
    """How much a strategy records. The default is cheap; ``Recording.everything()`` is thorough."""

    first_steps: int = 20  # record every one of the first steps: where the interesting things happen
    every: int = 50  # after those, record one step in `every`
    keep_last: int = 20  # ...and keep only the most recent `keep_last` of those sampled steps
    full_values: bool | None = None  # keep whole tensors: True always, False never, None when small
    small_tensor: int = 4096  # "small": at most this many elements (None mode keeps these whole)
    timeline: bool = False  # also time each replica's phases of a step (see TimelineRecord)
    tensors: bool = True  # keep what the tensors held (shards, outputs, all-reduces, sync check)

    @classmethod
    def everything(cls) -> "Recording":
        """Every step, every tensor in full: for small models and short runs."""
        return cls(first_steps=10**9, every=1, keep_last=10**9, full_values=True)

    @classmethod
    def timing(cls, first_steps: int = 1000) -> "Recording":
        """The timeline of the first steps and nothing else: cheap enough to time a large model
        (copying its weights and gradients to numpy would take longer than the step)."""
        return cls(first_steps=first_steps, timeline=True, tensors=False)

    @classmethod
    def first_step(cls) -> "Recording":
        """Step 0 only (who got which examples, its gradients); later steps pass a cheap gate.
        For runs that are timed: recording adds next to nothing after the first step."""
        return cls(first_steps=1, every=10**9, keep_last=1)

    def keeps(self, step):
        """Whether ``step`` is one of the sampled steps: THE rule, written once.

        ``step`` is a Python int (eager) or an int64 tensor (inside ``tf.function``): ``<``, ``%``,
        ``==`` and ``|`` mean the same for both, so the graph gate and the eager path cannot
        disagree. Of the steps sampled after ``first_steps`` only the latest ``keep_last`` stay.
        """
        return (step < self.first_steps) | (step % self.every == 0)

    def kept(self, steps_run: int) -> int:
        """How many steps a trace holds after ``steps_run`` steps under this rule (by counting)."""
        first = min(steps_run, self.first_steps)
        start = -(-self.first_steps // self.every) * self.every  # first multiple of `every` after those
        sampled = 0 if steps_run <= start else (steps_run - 1 - start) // self.every + 1
        return first + min(sampled, self.keep_last)

    def describe(self) -> str:
        """The rule in words, e.g. "the first 20 steps, then steps 50, 100, 150, …"."""
        if self.every == 1 and self.keep_last >= 10**9 or self.first_steps >= 10**9:
            return "every step"
        start = -(-self.first_steps // self.every) * self.every
        text = (f"the first {self.first_steps} steps, then " if self.first_steps else "") + (
            f"steps {start}, {start + self.every}, {start + 2 * self.every}, … (1 in {self.every}")
        return text + (f", keeping the latest {self.keep_last})" if self.keep_last < 10**9 else ")")

    def keeps_values(self, size: int) -> bool:
        """Whether a tensor of ``size`` elements is kept whole (its norm is always kept)."""
        return self.full_values if self.full_values is not None else size <= self.small_tensor


@dataclass
class VariableRecord:
    """One distributed variable: its components, one per replica device."""

    name: str  # the variable's name, e.g. "dense/kernel"
    kind: str  # TF class, e.g. "MirroredVariable" or "SyncOnReadVariable"
    shape: tuple[int | None, ...] | None  # None entries: unknown sizes; None: unknown rank
    dtype: str
    synchronization: str  # ON_WRITE (mirrored: written everywhere) or ON_READ (combined when read)
    aggregation: str  # how replica updates combine: NONE, SUM, MEAN, ONLY_FIRST_REPLICA
    trainable: bool
    devices: list[str]  # one component per replica, in replica order
    initial_values: list[np.ndarray] | None  # per replica at creation (None: large, or made in a graph)


@dataclass
class VariableSnapshot:
    """Every replica's copy of one variable at one moment."""

    label: str  # what the moment was, e.g. "after assign"
    step: int  # the last step run before the snapshot (-1: none yet)
    name: str
    values: list[np.ndarray]  # one per replica


@dataclass
class ShardRecord:
    """What one replica received in one step: its slice of the global batch."""

    step: int
    replica_id: int
    device: str
    batch_size: int  # per-replica batch size this step (the last batch may be smaller)
    example_ids: np.ndarray | None  # the examples' indices, when the data carries an index
    row_hashes: np.ndarray | None  # fingerprints of the feature rows, to find the indices later


@dataclass
class AllReduceRecord:
    """One call into a cross-device implementation, captured where TensorFlow makes it."""

    step: int  # the step it belongs to; outside any step: the last step run before it (-1: none)
    call: int  # order of this call within its step (or among the reductions outside any step)
    path: str  # "batch_reduce" (gradients, replica all_reduce), "reduce" (strategy.reduce,
    #            assign), "gather" (strategy.gather, all_gather: concatenated, not summed)
    reduce_op: str  # SUM, MEAN, or GATHER
    implementation: str  # e.g. "CollectiveAllReduce (RING)" or "ReductionToOneDevice"
    names: list[str]  # one per reduced tensor: the destination variable's name, or "value i"
    shapes: list[tuple[int, ...]]
    input_norms: np.ndarray  # (tensors, replicas): L2 norm of each replica's input
    output_norms: np.ndarray  # (tensors, destinations): L2 norm of each copy of the result
    #   (both computed when first read if the record was made with None and whole values)
    inputs: list[list[np.ndarray]] | None  # [tensor][replica] whole inputs, when kept
    outputs: list[list[np.ndarray]] | None  # [tensor][destination] whole outputs, when kept
    outside: bool = False  # made outside any step: eagerly outside strategy.run (Keras does at
    #                        set-up and epoch ends), or in a tf.function that ran no step
    applied_to: list[str | None] | None = None  # per tensor: the variable the program then
    #   updated with the result (TF's extended.update: an optimizer step), or None

    @property
    def num_replicas(self) -> int:
        return int(self.input_norms.shape[1])

    def gradient_of(self, t: int) -> str | None:
        """The variable whose gradient tensor ``t`` is: the result was applied to that variable,
        and was not a value aggregated *into* it (an assignment's destination is the variable)."""
        var = (self.applied_to or [None] * len(self.names))[t]
        return var if var is not None and self.names[t] != var else None


def _norms_from(name: str, values: str) -> property:
    """``record.<name>``: the field as given, or, given None, the norms of ``record.<values>``
    computed when first read (then kept). Recording keeps whole values at full speed and pays
    for their norms only if someone looks; a record without whole values is given its norms."""
    key = "_" + name

    def get(self):
        found = self.__dict__.get(key)
        if found is None and getattr(self, values) is not None:
            found = self.__dict__[key] = norms(getattr(self, values))
        return found

    def put(self, value) -> None:
        self.__dict__[key] = value

    return property(get, put, doc=f"(tensors, copies) L2 norms of ``{values}``.")


# After @dataclass made __init__, __eq__ and __repr__: they read and write through these.
AllReduceRecord.input_norms = _norms_from("input_norms", "inputs")
AllReduceRecord.output_norms = _norms_from("output_norms", "outputs")


@dataclass
class OutputRecord:
    """What the replica function returned on each replica (typically its local loss)."""

    step: int
    name: str  # the key in the returned dict, or "output i"
    values: list[np.ndarray]  # one per replica (shapes may differ, e.g. on an uneven batch)


@dataclass
class SyncRecord:
    """After a step: how far apart the replicas' copies of a variable are (0 when in sync)."""

    step: int
    name: str
    max_abs_diff: float  # largest |copy_r - copy_0| over replicas r and elements
    values: list[np.ndarray] | None  # per replica, when kept


@dataclass
class GradientRecord:
    """One replica's local gradient of one variable, as it entered the all-reduce."""

    step: int
    replica_id: int
    variable: str
    norm: float
    value: np.ndarray | None  # the whole gradient, when kept
    reduced_norm: float  # norm of the all-reduced gradient every replica received


@dataclass
class SkippedRecord:
    """A value the recorder saw but did not keep, and why: the trace never drops one silently."""

    step: int
    what: str  # where it was seen: "shards", "output", "all-reduce", "examples", "recording"
    name: str  # which value, e.g. "args[0]" or "output 1"
    reason: str  # in plain words, e.g. "not a batch: scalar per-replica value"


@dataclass
class ReductionStamps:
    """When one reduction of a step could start and when it was done, on each replica."""

    call: int  # order among the step's timed reductions
    inside_run: bool  # made inside strategy.run (an all-reduce in replica context), else after it
    inputs_ready: np.ndarray  # (replicas,) seconds: this replica's value to reduce was computed
    outputs_ready: np.ndarray  # (replicas,) seconds: the result had reached this replica


@dataclass
class TimelineRecord:
    """When each replica reached each point of one step: ``tf.timestamp()`` values (seconds since
    the Unix epoch), each taken once the tensors it waits for were computed. Recorded with
    ``Recording(timeline=True)``; :mod:`~mirrortutor.record.timeline` turns them into phases."""

    step: int
    eager: bool  # strategy.run was called eagerly (no tf.function around the step)
    devices: list[str]  # one per replica, in replica order
    launch: float = float("nan")  # the step began: its function started (or run was called)
    start: np.ndarray | None = None  # (replicas,) the replica's shard of the batch was ready
    end: np.ndarray | None = None  # (replicas,) its outputs, and its ops' effects, were done
    reductions: list[ReductionStamps] = field(default_factory=list)


@dataclass
class StepRecords:
    """Everything recorded in one step, by kind."""

    shards: list[ShardRecord] = field(default_factory=list)
    allreduces: list[AllReduceRecord] = field(default_factory=list)
    outputs: list[OutputRecord] = field(default_factory=list)
    sync: list[SyncRecord] = field(default_factory=list)
    skipped: list[SkippedRecord] = field(default_factory=list)
    timeline: TimelineRecord | None = None  # with Recording(timeline=True)


def norm(a: np.ndarray) -> float:
    """The L2 norm, without BLAS: this runs inside training, and on a small machine OpenBLAS's
    helper threads keep spinning after a call, taking CPU from the next training steps."""
    x = np.asarray(a, dtype=np.float64).ravel()
    return math.sqrt(float(np.einsum("i,i->", x, x)))


def norms(values: list[list[np.ndarray]]) -> np.ndarray:
    """(tensors, replicas) L2 norms; NaN where a tensor has fewer copies than another. A copy
    that is the same array as an earlier one (identical copies are kept once) gets its norm."""
    out = np.full((len(values), max(len(t) for t in values)), np.nan)
    for i, t in enumerate(values):
        found: dict[int, float] = {}  # id(array) -> its norm, within this tensor's copies
        out[i, :len(t)] = [found[id(a)] if id(a) in found else found.setdefault(id(a), norm(a))
                           for a in t]
    return out


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """An int64 fingerprint of each row's bytes, to recognise examples by content."""
    if len(rows) == 0:  # an empty shard: a replica with no examples this step
        return np.zeros(0, dtype=np.int64)
    rows = np.ascontiguousarray(rows).reshape(len(rows), -1)
    return np.array(
        [int.from_bytes(hashlib.blake2b(r.tobytes(), digest_size=8).digest(), "little", signed=True)
         for r in rows],
        dtype=np.int64,
    )
