"""Timestamps of a step, taken where each replica's work happens: ``Recording(timeline=True)``.

A step's timeline is made of ``tf.timestamp()`` values, each taken by an op that waits (control
dependencies) for exactly the tensors whose readiness it marks:

- **launch**, on the host: no dependency, so it runs as the step's function starts (eagerly: when
  ``strategy.run`` is called);
- **start** of replica ``r``, on its device: after launch and its shard of the batch;
- for each reduction of the step (an all-reduce inside ``run``, or ``strategy.reduce`` after
  it), **inputs ready** on replica ``r``: after its value to reduce; **outputs ready**: after the
  result has reached it;
- **end** of replica ``r``: after what its function returned *and* every op the function left
  on its device without a consumer (an optimizer's variable updates, say), so the end is when
  the replica's work is done, not when its loss was.

A replica's stamps are chained (each also waits for the one before), so they never go backwards.
Inside ``tf.function`` TensorFlow orders every stateful op that uses no resource in program order;
a timestamp in that chain would wait for the other replicas' stamps and read their times, so each
is let out of it (:func:`~mirrortutor.record.tf_internals.graph.independent`). No value the training
computes depends on a stamp: the numbers stay bit-identical. The stamps reach the trace through
the recorder's gates (:mod:`.gate`), on the steps the recording policy keeps, as
:class:`~mirrortutor.record.records.TimelineRecord`; :mod:`.timeline` reads them as phases.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from .folding import settled
from .records import ReductionStamps, TimelineRecord
from .tf_internals.graph import in_xla_context, independent
from .values import components, is_per_replica, leaves


def _canonical(device: str) -> str:
    return tf.DeviceSpec.from_string(device).to_string() if device else ""


def _tensors(value) -> list:
    """What a control dependency can wait for in one component: tensors (a sparse one's values)."""
    if isinstance(value, tf.IndexedSlices):
        return [value.values]
    return [value] if isinstance(value, tf.Tensor) else []


def _stamp(device: str, after: list):
    """``tf.timestamp()`` on ``device``, taken once everything in ``after`` is done (a sum
    grappler may fold: once its inputs are, see :func:`~.folding.settled`)."""
    after = settled([a for a in after if isinstance(a, tf.Tensor)]) + [
        a for a in after if a is not None and not isinstance(a, tf.Tensor)]
    with tf.device(device), tf.control_dependencies(after):
        return independent(tf.timestamp())


def _graph():
    """The graph being built, or None when executing eagerly."""
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


class Stamper:
    """Takes the timestamps of one strategy's steps, and sends them to its trace."""

    def __init__(self, trace, emitter, devices: list[str]):
        self.trace, self.emitter = trace, emitter
        self.devices = list(devices)  # the replicas' devices, in replica order
        self._canonical = [_canonical(d) for d in self.devices]
        self._run = None  # while run is traced: (graph, ops before it, step, eager, launch, starts)
        self._last = (None, [None] * len(self.devices))  # (graph, each replica's latest stamp)
        self._calls = 0  # reductions timed so far in this step
        self._eager = False

    def _record(self, step: int) -> TimelineRecord:
        slot = self.trace.slot(step)
        if slot.timeline is None:
            slot.timeline = TimelineRecord(step, self._eager, list(self.devices))
        return slot.timeline

    def _chain(self) -> list:
        """Each replica's latest stamp, when it lives in the graph being built."""
        graph, last = self._last
        return last if graph is _graph() else [None] * len(self.devices)

    def begin(self, step, args, kwargs) -> None:
        """Before ``strategy.run``: the launch, and each replica's start once its shard is ready."""
        if in_xla_context():  # no Python callback can be compiled: the gate warns once
            return
        graph = _graph()
        self._eager, self._calls = graph is None, 0
        shards = [[] for _ in self.devices]  # per replica: the tensors of its part of the batch
        for _, value in leaves({"args": args, "kwargs": kwargs or {}}):
            parts = components(value)
            if is_per_replica(value) and len(parts) == len(self.devices):
                for r, part in enumerate(parts):
                    shards[r] += _tensors(part)
        launch = _stamp(self.emitter.host_device, [])
        starts = [_stamp(d, [launch, *shards[r]]) for r, d in enumerate(self.devices)]
        self._last = (graph, starts)
        ops_before = len(graph.get_operations()) if graph is not None else 0
        self._run = (graph, ops_before, step, self._eager, launch, starts)

    def _left_on(self, graph, ops_before: int) -> list[list]:
        """Per replica: the stateful ops ``run`` made on its device that nothing consumes (its
        variable updates, say), which run whether or not anything reads them."""
        left = [[] for _ in self.devices]
        if graph is None:  # eagerly, every op has run by the time run returns
            return left
        index = {d: r for r, d in enumerate(self._canonical)}
        for op in graph.get_operations()[ops_before:]:
            r = index.get(_canonical(op.device))
            unread = not any(t.consumers() for t in op.outputs)
            if r is not None and op.op_def.is_stateful and unread:
                left[r].append(op)
        return left

    def end(self, result) -> None:
        """After ``strategy.run``: each replica's end, once its outputs and its ops are done."""
        if self._run is None:
            return
        graph, ops_before, step, eager, launch, starts = self._run
        self._run = None
        outputs = [[] for _ in self.devices]
        for _, value in leaves(result):
            parts = components(value)
            if isinstance(value, tf.distribute.DistributedValues) and len(parts) == len(self.devices):
                for r, part in enumerate(parts):
                    outputs[r] += _tensors(part)
        left = self._left_on(graph, ops_before)
        last = self._chain()
        ends = [_stamp(d, [*outputs[r], *left[r], last[r]]) for r, d in enumerate(self.devices)]
        self._last = (graph, ends)
        n = len(self.devices)

        def record(step, launch, *values):
            rec = self._record(step)
            rec.eager, rec.launch = eager, float(launch)
            rec.start = np.array(values[:n], np.float64)
            rec.end = np.array(values[n:], np.float64)

        self.emitter.emit(step, [launch, *starts, *ends], record)

    def reduction(self, step, inputs: list[list], outputs: list[list], inside_run: bool) -> None:
        """A reduction of the step: when each replica's input was ready, and its result there.

        ``inputs[value][replica]`` and ``outputs[value][destination]`` are the components TF
        reduced and returned. Reductions of values that are not one per replica are not timed.
        """
        n = len(self.devices)
        if in_xla_context() or not any(len(parts) == n for parts in inputs):
            return
        ins = [[t for parts in inputs if len(parts) == n for t in _tensors(parts[r])]
               for r in range(n)]
        flat_out = [t for parts in outputs for t in parts]
        here = [[t for t in flat_out if _canonical(getattr(t, "device", "")) == d]
                for d in self._canonical]  # the result's copy on each replica's device, if any
        last = self._chain()
        ready = [_stamp(d, [*ins[r], last[r]]) for r, d in enumerate(self.devices)]
        done = [_stamp(d, [*_flat(here[r] or flat_out), ready[r]])
                for r, d in enumerate(self.devices)]
        self._last = (_graph(), done)
        call, self._calls = self._calls, self._calls + 1

        def record(step, *values):
            self._record(step).reductions.append(ReductionStamps(
                call, inside_run, np.array(values[:n], np.float64),
                np.array(values[n:], np.float64)))

        self.emitter.emit(step, [*ready, *done], record)


def _flat(values: list) -> list:
    return [t for v in values for t in _tensors(v)]
