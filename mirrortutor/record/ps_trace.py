"""What a recording ``ParameterServerStrategy`` and its coordinator saw, as plain records.

Two kinds of record, both numpy-only like :mod:`.records`:

- :class:`PlacementRecord`: one variable created in the strategy's scope, and which parameter
  server holds it (or each of its shards, with a ``variable_partitioner``);
- :class:`ScheduledRecord`: one function ``coordinator.schedule`` ran to the end: which worker ran
  it, when, and which *versions* of the parameters it read and wrote.

**Versions.** The recording adds one variable to the cluster, ``mirrortutor_version`` (an int64
on ps 0, created outside the strategy's variable placement, so TensorFlow places the program's own
variables exactly as without it). A scheduled function reads it first (``version_read``), before
anything else it does; after everything else it did has finished, it increments it with
TensorFlow's ``ResourceCountUpTo`` op, which returns the count before the increment under the
variable's own mutex (the op's doc: "the values produced will all be distinct"), so each finished
function gets its own ``version_written`` = that count + 1. Nothing else is locked: the program's
variables are read and updated by TensorFlow exactly as without the recording.

What the numbers mean, and what they do not:

- ``version_written`` counts the scheduled functions that finished on the ps, in the order their
  increments landed. It counts every scheduled function, one that only evaluates too.
- ``version_read = r`` means: every function whose ``version_written <= r`` had finished all its
  updates before this function read any variable. Its reads may *also* have seen part of the
  updates of functions still running then: TensorFlow reads each variable (each ps task) on its
  own, with no lock, so one read can mix versions across variables. ``r`` is a lower bound.
- ``staleness = version_written - 1 - version_read``: how many other functions' increments landed
  between this one's read of the counter and its own increment. Two functions can read the same
  version; none can write the same one. It is close to, not exactly, the number of updates this
  function's gradient missed, and it can be off either way by an update still in progress at either
  end: one half-landed when this function read the variables is counted, though partly seen; one
  whose variable updates landed before this function's but whose increment came after it was
  missed and is not counted.
- A version counted but never logged (:meth:`ParameterServerTrace.unlogged_versions`) is a run
  whose increment landed but whose results never reached the coordinator: the worker failed after
  it, and TensorFlow ran the function again elsewhere (``schedule`` is at-least-once).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from .records import Recording
from .trace import Trace

__all__ = ["FailedRecord", "ParameterServerTrace", "PlacementRecord", "ScheduledRecord"]


@dataclass
class PlacementRecord:
    """One variable created in the strategy's scope, and where TensorFlow put it."""

    name: str  # the variable's name, e.g. "kernel" (a sharded one: its name without /part_i)
    kind: str  # TF class: "CachingVariable", "AggregatingVariable", "ShardedVariable", …
    shape: tuple[int | None, ...] | None  # the whole variable's shape
    dtype: str
    trainable: bool
    devices: list[str]  # one per shard (one entry: not sharded), e.g. "/job:ps/replica:0/task:1/…"
    ps_tasks: list[int]  # the ps task of each shard (-1: not on a ps)
    shard_shapes: list[tuple[int | None, ...]]


@dataclass
class ScheduledRecord:
    """One scheduled function that ran to the end (its results reached the coordinator)."""

    schedule: int  # the order of its coordinator.schedule call, from 0
    function: str  # the scheduled tf.function's name
    worker: int  # experimental_get_current_worker_index() inside the function
    started: float  # tf.timestamp() on the worker before it read anything (Unix seconds)
    ended: float  # tf.timestamp() on the worker after its increment of the version
    version_read: int  # the version counter when it started (see the module doc)
    version_written: int  # the count its own increment made: unique among finished functions

    @property
    def staleness(self) -> int:
        """Other functions whose increments landed between this one's read of the counter and its
        own increment (see the module doc for what that does and does not count)."""
        return self.version_written - 1 - self.version_read


@dataclass
class FailedRecord:
    """A scheduled function whose results never came: its error (cancelled, or it raised)."""

    schedule: int
    function: str
    error: str  # the exception's type and message, as the coordinator got it


class ParameterServerTrace(Trace):
    """A :class:`~mirrortutor.Trace` of parameter-server training: placement and the log of
    scheduled functions. ``trace.save(path)`` and ``mt.Trace.load(path)`` keep all of it."""

    def __init__(self, recording: Recording | None = None):
        super().__init__(recording)
        self.placements: list[PlacementRecord] = []
        self.functions: list[ScheduledRecord] = []  # in the order the coordinator collected them
        self.failures: list[FailedRecord] = []
        self.version_variable = ""  # the counter the recording added: its name and device
        self.versions_counted = 0  # the counter's value when last read (at the last collection)
        self.pending = 0  # scheduled functions whose results had not come when last collected
        self.scheduled = 0  # coordinator.schedule calls made

    # ---- reading -------------------------------------------------------------------------------
    @property
    def steps_run(self) -> int:
        """Scheduled functions logged so far (no ``strategy.run`` steps are counted here)."""
        return len(self.functions)

    def by_version(self) -> list[ScheduledRecord]:
        """The logged functions in the order their versions were written."""
        return sorted(self.functions, key=lambda f: f.version_written)

    def staleness(self) -> np.ndarray:
        """Each logged function's staleness, in version order."""
        return np.array([f.staleness for f in self.by_version()], dtype=np.int64)

    def per_worker(self) -> dict[int, int]:
        """How many logged functions each worker ran."""
        return dict(sorted(Counter(f.worker for f in self.functions).items()))

    def unlogged_versions(self) -> list[int]:
        """Versions the counter reached with no logged function: increments of runs whose results
        never reached the coordinator (a worker lost after its update; TF ran it again)."""
        logged = {f.version_written for f in self.functions}
        return [v for v in range(1, self.versions_counted + 1) if v not in logged]

    def repeated_versions(self) -> list[int]:
        """Versions written by more than one logged function (never expected: the counter's
        increment returns distinct values; listed so that a surprise is seen, not hidden)."""
        counts = Counter(f.version_written for f in self.functions)
        return sorted(v for v, n in counts.items() if n > 1)

    def placement_table(self) -> str:
        """Each variable, its shape and the ps task(s) holding it."""
        rows = [f"{'variable':<28} {'shape':<14} {'dtype':<8} ps task(s)"]
        for p in self.placements:
            rows.append(f"{p.name:<28} {str(p.shape):<14} {p.dtype:<8} "
                        + ", ".join(map(str, p.ps_tasks)))
        return "\n".join(rows)

    def summary(self) -> str:
        """A few plain lines: what ran where, and the staleness measured."""
        lines = [f"{self.scheduled} function(s) scheduled, {len(self.functions)} logged, "
                 f"{len(self.failures)} failed, {self.pending} not collected yet.",
                 f"{len(self.placements)} variable(s) created in the strategy's scope, on ps "
                 f"task(s) {sorted({t for p in self.placements for t in p.ps_tasks})}."]
        if self.functions:
            stale = self.staleness()
            lines.append(f"Functions per worker: {self.per_worker()}. Staleness (versions "
                         f"finished between a function's start and its own update): mean "
                         f"{stale.mean():.2f}, max {stale.max()}.")
        unlogged = self.unlogged_versions()
        if unlogged:
            lines.append(f"{len(unlogged)} version(s) counted on the ps with no logged function "
                         f"(a run whose results were lost, then run again): {unlogged[:10]}.")
        if self.version_variable:
            lines.append(f"Added by the recording: the counter {self.version_variable}.")
        return "\n".join(lines)

    # ---- files ---------------------------------------------------------------------------------
    def state(self) -> dict:
        return {**super().state(), "placements": self.placements, "functions": self.functions,
                "failures": self.failures, "version_variable": self.version_variable,
                "versions_counted": self.versions_counted, "pending": self.pending,
                "scheduled": self.scheduled}

    @classmethod
    def from_state(cls, state: dict) -> "ParameterServerTrace":
        trace = super().from_state(state)
        trace.placements, trace.functions = state["placements"], state["functions"]
        trace.failures, trace.version_variable = state["failures"], state["version_variable"]
        trace.versions_counted, trace.pending = state["versions_counted"], state["pending"]
        trace.scheduled = state["scheduled"]
        return trace

    def __repr__(self) -> str:
        return (f"<ParameterServerTrace: {self.scheduled} scheduled, {len(self.functions)} "
                f"logged, {len(self.placements)} variables>")


PS_RECORDS = (PlacementRecord, ScheduledRecord, FailedRecord)
