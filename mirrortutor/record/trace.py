"""What an instrumented strategy saw: plain records a notebook can print, tabulate and plot.

A :class:`Trace` is filled while TensorFlow runs (see :mod:`mirrortutor.record.strategy`) and read
afterwards. It holds numpy arrays, never TF tensors, so reading it cannot disturb training, and
:meth:`Trace.save` / :meth:`Trace.load` move it between machines (format: :mod:`.persist`).

Steps are counted from 0, one per ``strategy.run`` call (Keras ``fit`` makes one call per batch).
A step holds what happened inside its ``run`` and, in a ``tf.function``, the reductions of the
run's results that follow in the same function (the custom loop's ``strategy.reduce`` of the
loss). A reduction made outside any ``run`` (eagerly: Keras does some at set-up and at the end of
each epoch) is not a step: it is listed apart, see :meth:`Trace.outside_reductions`.

Recording is bounded by a :class:`Recording` policy: the first steps, then a sample of later
steps of which only the most recent are kept, so a long run never fills memory. Warnings go
through :meth:`Trace.warn`: once per cause, and at most :data:`MAX_WARNINGS` of them.
"""

from __future__ import annotations

import warnings as _warnings
from collections import OrderedDict

import numpy as np

from ..errors import NotRecordedError
from . import chrome_trace, report
from .records import (AllReduceRecord, GradientRecord, OutputRecord, Recording, ShardRecord,
                      SkippedRecord, StepRecords, SyncRecord, VariableRecord, VariableSnapshot,
                      row_hashes)
from .timeline import Timeline

MAX_WARNINGS = 100  # distinct causes kept in trace.warnings; later ones are only counted


class Trace:
    """Everything a strategy recorded, grouped by kind and ordered by step."""

    def __init__(self, recording: Recording | None = None):
        self.recording = recording or Recording()
        self.variables: list[VariableRecord] = []
        self.snapshots: list[VariableSnapshot] = []
        self.warnings: list[str] = []  # mistakes spotted while recording, in plain words
        self.warnings_dropped = 0  # further warnings, beyond MAX_WARNINGS causes
        self.warned: set[str] = set()  # the causes already warned about (each warns once)
        self.outside_count = 0  # reductions made outside any step, kept or not
        self._counter = None  # a live read of the strategy's step counter, while it runs
        self._steps_run = 0  # the count, when not live (a loaded trace)
        self._steps: "OrderedDict[int, StepRecords]" = OrderedDict()
        self._outside = StepRecords()  # reductions outside any step (bounded like the steps)
        self.worker: int | None = None  # a multi-worker job's worker (its TF_CONFIG task index)

    # ---- filling (called by the strategy's recorder) ------------------------------------------
    def follow_step_counter(self, read) -> None:
        """Count ``steps_run`` with ``read()`` (the recorder's step counter)."""
        self._counter = read

    def slot(self, step: int) -> StepRecords:
        """Where ``step``'s records go (a throwaway once the step is evicted by the policy)."""
        if step not in self._steps:
            self._steps[step] = StepRecords()
            if step >= self.recording.first_steps:  # only a sampled step can evict another
                sampled = [s for s in self._steps if s >= self.recording.first_steps]
                if len(sampled) > self.recording.keep_last:
                    del self._steps[sampled[0]]
        return self._steps.get(step, StepRecords())  # an evicted step records into a throwaway

    def add_outside(self, record: AllReduceRecord | SkippedRecord) -> None:
        """Keep a reduction made outside any step: the first ones and the latest, like steps."""
        reduction = isinstance(record, AllReduceRecord)
        kind = self._outside.allreduces if reduction else self._outside.skipped
        self.outside_count += int(reduction)
        kind.append(record)
        if len(kind) > self.recording.first_steps + self.recording.keep_last:
            del kind[self.recording.first_steps]

    def warn(self, message: str, cause: str | None = None) -> None:
        """The one warning channel: a Python warning and a line in ``trace.warnings``, once per
        ``cause`` (default: the message itself), and at most :data:`MAX_WARNINGS` causes."""
        key = message if cause is None else cause
        if key in self.warned:
            return
        if len(self.warned) >= MAX_WARNINGS:
            self.warnings_dropped += 1
            return
        self.warned.add(key)
        self.warnings.append(message)
        _warnings.warn(message, stacklevel=3)

    def clear(self) -> None:
        """Forget every step and every outside reduction (the variables stay listed)."""
        self._steps.clear()
        self._outside = StepRecords()
        self.outside_count = 0
        self.snapshots.clear()

    # ---- reading --------------------------------------------------------------------------
    @property
    def steps_run(self) -> int:
        """Steps run so far (``strategy.run`` calls), recorded or not."""
        return int(self._counter()) if self._counter is not None else self._steps_run

    @property
    def steps(self) -> list[int]:
        """The recorded steps, in order."""
        return list(self._steps)

    def _gather(self, kind: str, step: int | None) -> list:
        steps = [step] if step is not None else list(self._steps)
        return [r for s in steps if s in self._steps for r in getattr(self._steps[s], kind)]

    def shards(self, step: int | None = None) -> list[ShardRecord]:
        return self._gather("shards", step)

    def allreduces(self, step: int | None = None, path: str | None = None) -> list[AllReduceRecord]:
        """The all-reduces (and gathers) of the recorded steps; see also outside_reductions()."""
        return [r for r in self._gather("allreduces", step) if path is None or r.path == path]

    def outside_reductions(self) -> list[AllReduceRecord]:
        """Reductions made outside any step (``record.step``: the last step run before it)."""
        return list(self._outside.allreduces)

    def outputs(self, step: int | None = None) -> list[OutputRecord]:
        return self._gather("outputs", step)

    def sync(self, step: int | None = None) -> list[SyncRecord]:
        return self._gather("sync", step)

    def skipped(self, step: int | None = None) -> list[SkippedRecord]:
        """What was seen but not kept, with the reason (all steps, and outside any step)."""
        outside = list(self._outside.skipped) if step is None else []
        return self._gather("skipped", step) + outside

    def max_sync_diff(self) -> float:
        """The largest difference between replicas' copies seen after any recorded step."""
        return max((r.max_abs_diff for r in self.sync()), default=0.0)

    def _step_reductions(self, step: int | None) -> list[AllReduceRecord]:
        """A step's reductions, and those made eagerly right after it (outside ``run``)."""
        return self.allreduces(step) + [r for r in self._outside.allreduces
                                        if step is None or r.step == step]

    def gradients(self, step: int | None = None) -> list[GradientRecord]:
        """Each replica's local gradient of each variable: the inputs of the reductions whose
        results the program applied to that variable (named by it, never guessed from shapes),
        in the step or eagerly right after it."""
        result = []
        for rec in self._step_reductions(step):
            for t in range(len(rec.names)):
                var = rec.gradient_of(t)
                for r in range(rec.num_replicas if var else 0):
                    value = rec.inputs[t][r] if rec.inputs is not None else None
                    result.append(GradientRecord(rec.step, r, var, float(rec.input_norms[t, r]),
                                                 value, float(rec.output_norms[t, 0])))
        return result

    def reduced_gradients(self, step: int) -> dict[str, np.ndarray]:
        """The all-reduced gradient of each variable at ``step``: what every replica applied."""
        found = {rec.gradient_of(t): rec.outputs[t][0] for rec in self._step_reductions(step)
                 if rec.outputs is not None for t in range(len(rec.names)) if rec.gradient_of(t)}
        if not found:
            raise NotRecordedError(
                f"No all-reduced gradients with whole values were recorded at step {step}. Record "
                "them with mt.Recording(full_values=True), or pick a recorded step: "
                f"{self.steps[:10]}.")
        return found

    def gradient_scale(self, reference, step: int = 0) -> float:
        """How many times larger the applied gradient is than ``reference``: the ratio of their
        norms, every value flattened into one vector. It measures size, not direction (two
        different gradients of equal norm give 1.0): compare element by element to show equality.

        ``reference``: the gradients of the mean loss over the same *global* batch, computed on
        one device (a list of arrays, in the variables' order). A correct loop gives 1.0. A loss
        divided by the per-replica batch size instead of the global one gives exactly
        ``num_replicas_in_sync``, and a warning says how to fix it.
        """
        applied = np.concatenate([np.ravel(g) for g in self.reduced_gradients(step).values()])
        expected = np.concatenate([np.ravel(np.asarray(g)) for g in reference])
        scale = float(np.linalg.norm(applied) / np.linalg.norm(expected))
        replicas = max(g.replica_id for g in self.gradients(step)) + 1
        if replicas > 1 and abs(scale - replicas) < 1e-3 * replicas:
            self.warn(
                f"The applied gradient is {scale:.4g} times the full-batch gradient, which is the "
                f"number of replicas ({replicas}): the loss was probably averaged over each "
                "replica's own batch. Divide by the GLOBAL batch size instead: "
                "tf.nn.compute_average_loss(per_example_loss, global_batch_size=...).",
                cause=f"gradient scale at step {step}")
        return scale

    def example_ids(self, step: int, dataset=None) -> dict[int, np.ndarray]:
        """Which examples each replica received in ``step``: ``{replica_id: indices}``.

        The examples are known by name: the batch's field called ``index`` (``mt.data``'s
        ``to_tf()`` yields ``Example(index, x, y)``). For ``(x, y)`` data, as Keras ``fit`` takes,
        pass the :class:`mirrortutor.data.Dataset` it came from and the examples are recognised
        by their feature rows. Otherwise a :class:`~mirrortutor.errors.NotRecordedError` says
        what was recorded (the shard sizes) and how to add an index. A step not recorded: ``{}``.
        """
        out = {}
        lookup = None
        shards = self.shards(step)
        for rec in shards:
            if rec.example_ids is not None:
                out[rec.replica_id] = rec.example_ids
            elif rec.row_hashes is not None and dataset is not None:
                if lookup is None:
                    lookup = dict(zip(row_hashes(dataset.x).tolist(), dataset.index.tolist()))
                out[rec.replica_id] = np.array([lookup.get(h, -1) for h in rec.row_hashes.tolist()])
        if shards and not out:
            raise NotRecordedError(report.unidentified(step, shards))
        return out

    def nbytes(self) -> int:
        """Approximate memory the trace holds, in bytes (an array kept for several identical
        copies, see :func:`~.captures.kept_copies`, counted once)."""
        total, seen = 0, set()

        def add(obj) -> None:
            nonlocal total
            if isinstance(obj, np.ndarray):
                total += 0 if id(obj) in seen else obj.nbytes
                seen.add(id(obj))
            elif isinstance(obj, (list, tuple)):
                for o in obj:
                    add(o)
            elif hasattr(obj, "__dataclass_fields__"):
                total += 64
                for name in obj.__dataclass_fields__:
                    add(getattr(obj, name))

        add([self.variables, self.snapshots, self._outside, list(self._steps.values())])
        return total

    def timed_steps(self) -> list[int]:
        """The recorded steps that have a timeline (``Recording(timeline=True)``)."""
        return [s for s, records in self._steps.items() if records.timeline is not None]

    def timeline(self, steps: list[int] | None = None) -> "Timeline":
        """Each replica's phases (input, compute, waiting, all-reduce) in the recorded steps (or
        ``steps`` of them), from their timestamps: see :mod:`.timeline`."""
        timed = self.timed_steps()
        wanted = timed if steps is None else [s for s in steps if s in set(timed)]
        return Timeline([self._steps[s].timeline for s in wanted])

    def save_timeline(self, path, steps: list[int] | None = None) -> None:
        """:meth:`timeline` as Chrome trace-event JSON, for https://ui.perfetto.dev or
        ``chrome://tracing``: a track per replica, a span per phase (see :mod:`.chrome_trace`)."""
        chrome_trace.write(path, [self.timeline(steps)])

    # ---- reports and files -------------------------------------------------------------------
    def summary(self) -> str:
        """A few plain lines: what was run, what was recorded by which rule, what was not."""
        return report.summary(self)

    def variables_table(self) -> str:
        """The variables as a plain table: name, kind, synchronization, aggregation, devices."""
        return report.variables_table(self)

    def allreduce_table(self, step: int | None = None, digits: int = 4) -> str:
        """The all-reduces as a plain table: what went in from each replica, what came out."""
        return report.allreduce_table(self, step, digits)

    def state(self) -> dict:
        """Everything the trace holds, by name, as plain records (what :meth:`save` writes)."""
        return {"recording": self.recording, "variables": self.variables,
                "snapshots": self.snapshots, "warnings": self.warnings,
                "warnings_dropped": self.warnings_dropped, "warned": sorted(self.warned),
                "steps_run": self.steps_run, "outside_count": self.outside_count,
                "steps": [[step, records] for step, records in self._steps.items()],
                "outside": self._outside, "worker": self.worker}

    @classmethod
    def from_state(cls, state: dict) -> "Trace":
        """A trace holding ``state`` (see :meth:`state`); its step count no longer moves."""
        trace = cls(state["recording"])
        trace.variables, trace.snapshots = state["variables"], state["snapshots"]
        trace.warnings, trace.warned = state["warnings"], set(state["warned"])
        trace.warnings_dropped = state["warnings_dropped"]
        trace.outside_count = state["outside_count"]
        trace._steps_run = state["steps_run"]
        trace._steps = OrderedDict((step, records) for step, records in state["steps"])
        trace._outside = state["outside"]
        trace.worker = state.get("worker")  # absent from files of single-machine runs before it
        return trace

    def save(self, path) -> None:
        """Write the trace to ``path`` (one ``.npz`` file: arrays, and the records as JSON; the
        format is documented in :mod:`mirrortutor.record.persist`). ``Trace.load`` reads it."""
        from .persist import save_trace
        save_trace(self, path)

    @classmethod
    def load(cls, path) -> "Trace":
        """Read a trace written by :meth:`save` (on any machine: no TensorFlow needed)."""
        from .persist import load_trace
        return load_trace(path)

    def __repr__(self) -> str:
        return f"<Trace: {self.steps_run} steps run, {len(self._steps)} recorded>"
