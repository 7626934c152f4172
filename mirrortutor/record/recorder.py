"""The recorder: the one writer of an instrumented strategy's trace.

Values flow one way: TensorFlow's routing points (:mod:`.tf_internals.hooks`) tell the
:class:`Recorder` what happens (a variable created or updated, a step run, a reduction made); it
decides what to keep, describes it as a capture (:mod:`.captures`) and hands capture and tensors to
its gate (:mod:`.gate`), which delivers numpy copies into the :class:`~.trace.Trace` on the steps
the policy keeps; plots and tables read the trace. ``hooks → recorder → gate → captures → trace``.

It records each replica's shard of the batch and what it returned, whether the replicas' weights
still agree after each step, the variables created in scope, and every reduction's inputs and
outputs. A reduced value the program then applies to a variable (``extended.update``, which every
optimizer step goes through) is named for that variable: TensorFlow's own pairing, not shapes.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np
import tensorflow as tf

from ..errors import OutsideScopeError
from .crossdevice import check_same_shapes
from .gate import Emitter, Lazy
from .captures import (OutputCapture, ReductionCapture, ShardCapture, Skipped, StepMark,
                       SyncCapture)
from .records import Recording, VariableRecord, VariableSnapshot
from .stamps import Stamper
from .trace import Trace
from .values import (INDEX_FIELD, components, is_per_replica, leaves, output_items, path_name,
                     why_not_a_batch, why_not_an_index, why_not_recorded)

__all__ = ["Recorder"]


class Recorder:
    """Writes one strategy's :class:`Trace`. It is the strategy's
    :class:`~mirrortutor.record.tf_internals.hooks.Observer`: the extended object calls it."""

    def __init__(self, recording: Recording | None):
        self.trace = Trace(recording)
        self.variables: list = []  # the distributed variables, for snapshots and the sync check
        self.in_run = False
        self.in_reduce = 0  # inside strategy.reduce, whose axis=... path calls run itself
        self.run_step = None  # inside a graph's run: the step tensor every record shares
        self.emitter: Emitter | None = None
        self.step_counter: tf.Variable | None = None
        self.step_graphs: weakref.WeakSet = weakref.WeakSet()  # graphs that traced a step
        self._graph_steps = weakref.WeakKeyDictionary()  # graph -> its latest run's step tensor
        self.stamper: Stamper | None = None  # with Recording(timeline=True): the step's timestamps
        self._names: dict[int, str] = {}  # id(distributed variable) -> its name in the trace
        # The current step's reduction results: (tensor, the capture's applied_to, its index).
        self._results: list[tuple] = []

    def attach(self, host: str) -> None:
        """After TF's __init__: the step counter on the host CPU, and the callbacks' emitter."""
        with tf.device(host):
            self.step_counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                            name="mirrortutor_step")
        self.trace.follow_step_counter(lambda: int(self.step_counter.numpy()))
        # One rule for eager steps and graph gates alike: Recording.keeps.
        self.emitter = Emitter(host, self.trace.recording.keeps, self.trace.warn)

    def current_step(self):
        """The step being run: a Python int eagerly, a tensor inside a graph."""
        if tf.executing_eagerly():
            return int(self.step_counter.numpy()) - 1
        if self.in_run and self.run_step is not None:  # inside run: the step already read
            return self.run_step
        found = self._graph_steps.get(tf.compat.v1.get_default_graph())  # after a run: its step
        return self.step_counter.read_value() - 1 if found is None else found

    def begin_step(self):
        """In a graph, the step's tensor; and remember that this function (and those around it)
        runs a step: its later reductions (the loop's loss reduce) belong to it and share it."""
        graph = tf.compat.v1.get_default_graph()
        step = self._graph_steps[graph] = self.step_counter.read_value() - 1
        while graph is not None and graph not in self.step_graphs:
            self.step_graphs.add(graph)
            graph = getattr(graph, "outer_graph", None)
        return step

    def in_step(self) -> bool:
        """Whether a reduction made now belongs to a step (else: outside any step)."""
        return self.in_run or (not tf.executing_eagerly()
                               and tf.compat.v1.get_default_graph() in self.step_graphs)

    def step(self, run, args, kwargs, devices: list[str]):
        """One ``strategy.run``: ``run()`` is TensorFlow's, recorded around. A nested run, or the
        one ``strategy.reduce(axis=...)`` makes, is part of what is already recorded: not a step."""
        if self.in_run or self.in_reduce:
            return run()
        self.step_counter.assign_add(1)
        step = self.current_step() if tf.executing_eagerly() else self.begin_step()
        self._results.clear()  # a new step: the reductions an update can name start again
        if self.trace.recording.timeline and self.stamper is None:
            self.stamper = Stamper(self.trace, self.emitter, devices)
        tensors = self.trace.recording.tensors
        with self.emitter.one_gate_per_device(step):  # in a graph: one recording branch per device
            self.record_step(step)
            if tensors:
                self.record_shards(step, args, kwargs, devices)
            if self.stamper is not None:
                self.stamper.begin(step, args, kwargs)
            self.in_run = True
            self.run_step = None if tf.executing_eagerly() else step  # one read per step, shared
            try:
                result = run()
            finally:
                self.in_run = False
                self.run_step = None
            if self.stamper is not None:
                self.stamper.end(result)
            if tensors:
                self.record_outputs(step, result)
                self.record_sync(step)
        return result

    # ---- the Observer: what the extended object reports ----------------------------------------
    def variable_created(self, var) -> None:
        components = list(var.values)
        size = var.shape.num_elements()  # None: a shape not fully known
        initial = None
        if tf.executing_eagerly() and size is not None and self.trace.recording.keeps_values(size):
            initial = [np.asarray(c.numpy()) for c in components]
        self.variables.append(var)
        # A name of its own in the trace, as TF names ops in a graph: "Variable", "Variable_1", …
        name = base = var.name.split(":")[0]
        taken = set(self._names.values())
        for k in range(1, len(taken) + 2):
            if name not in taken:
                break
            name = f"{base}_{k}"
        self._names[id(var)] = name
        self.trace.variables.append(VariableRecord(
            name=name, kind=type(var).__name__,
            shape=tuple(var.shape.as_list()) if var.shape.rank is not None else None,
            dtype=var.dtype.name, synchronization=var.synchronization.name,
            aggregation=var.aggregation.name, trainable=bool(var.trainable),
            devices=[c.device for c in components], initial_values=initial))

    def reducing(self, values: list) -> None:
        check_same_shapes([components(v) for v in values])

    def reduced(self, path, reduce_op, values, destinations, outputs, implementation) -> None:
        inputs, results, outside = ([components(v) for v in values],
                                    [components(o) for o in outputs], not self.in_step())
        if self.trace.recording.tensors:
            self._capture(path, reduce_op, inputs, destinations, results, implementation, outside)
        if self.stamper is not None and not outside and path != "gather":
            self.stamper.reduction(self.current_step(), inputs, results, inside_run=self.in_run)

    def _capture(self, path, reduce_op, inputs: list[list], destinations: list,
                 results: list[list], implementation: str, outside: bool) -> None:
        """Keep one reduction: ``inputs[tensor][replica]`` in, ``results[tensor][destination]``
        out, delivered into the trace by a gate. Norms always; whole values when the policy keeps
        tensors that size; a tensor that cannot be copied (a sparse gradient) is recorded as
        skipped, with the reason. Its results are remembered, so that a variable update made
        with them names them (:meth:`updating`)."""
        op = reduce_op.name if hasattr(reduce_op, "name") else str(reduce_op).upper()
        names = [self._destination_name(d, i) for i, d in enumerate(destinations)]
        reasons = [next(filter(None, map(why_not_recorded, t + r)), None)
                   for t, r in zip(inputs, results)]
        kept = [i for i, reason in enumerate(reasons) if not reason]
        if not kept and not any(reasons):
            return
        capture = ReductionCapture(
            path, op, implementation, [names[i] for i in kept], [len(inputs[i]) for i in kept],
            [len(results[i]) for i in kept],
            [Skipped("all-reduce", f"{path} {op} {n}", reason)
             for n, reason in zip(names, reasons) if reason], outside, [None] * len(kept))
        if path != "gather":
            for k, i in enumerate(kept):
                for part in results[i]:
                    self._results.append((part, capture.applied_to, k))
        flat = [t for i in kept for t in inputs[i]] + [t for i in kept for t in results[i]]
        self.emitter.emit(self.current_step(), flat, self._into(capture), always=outside)

    def _destination_name(self, destination, i: int) -> str:
        """A variable destination by its name in the trace; any other by position."""
        name = self._names.get(id(destination))
        if name is None and isinstance(destination, tf.Variable):
            name = destination.name.split(":")[0]
        return name or f"value {i}"

    def updating(self, var, args) -> None:
        """TensorFlow updates ``var`` with ``args`` (``extended.update``: an optimizer step, an
        assignment): a reduced value among them is named for ``var``."""
        name = self._names.get(id(var))
        if name is None or not args or not self._results:
            return
        for part in components(args[0]):
            found = self._result_of(part)
            if found is not None:
                applied, k = found
                applied[k] = name

    def _result_of(self, tensor):
        """``(applied_to, index)`` of the reduction result ``tensor`` is, or None. In a graph: back
        through the ``Identity``/``IdentityN`` ops TF passes results on with. Eagerly those make
        new tensors: the first unnamed result bit for bit equal (recorded steps only)."""
        if not tf.executing_eagerly():
            while tensor is not None:
                for part, applied, k in self._results:
                    if part is tensor:
                        return applied, k
                op = getattr(tensor, "op", None)
                if op is None or op.type not in ("Identity", "IdentityN"):
                    return None
                tensor = op.inputs[tensor.value_index if op.type == "IdentityN" else 0]
            return None
        if not self.trace.recording.keeps(self.current_step()):
            return None
        value = np.asarray(tensor)
        for part, applied, k in self._results:  # an earlier traced step's results: not values
            if applied[k] is None and not tf.is_symbolic_tensor(part) \
                    and part.shape == tensor.shape and part.dtype == tensor.dtype \
                    and np.array_equal(np.asarray(part), value):
                return applied, k
        return None

    def unmirrored_update(self, var, num_replicas: int) -> None:
        name = getattr(var, "name", repr(var)).split(":")[0]
        device = getattr(var, "device", "") or "one device"
        raise OutsideScopeError(
            f"Variable {name!r} was not created inside this strategy's scope, so it is a single "
            f"variable on {device}, not one copy per replica, and the {num_replicas} replicas "
            "cannot update it together. Create the model and the optimizer inside `with "
            "strategy.scope():` (build the model there too), then train again.")

    # ---- snapshots, shards, outputs and the sync check ------------------------------------------
    def snapshot(self, label: str = "") -> list[VariableSnapshot]:
        step = int(self.step_counter.numpy()) - 1
        shots = [VariableSnapshot(label, step, self._names[id(var)],
                                  [np.asarray(c.numpy()) for c in var.values])
                 for var in self.variables]
        self.trace.snapshots.extend(shots)
        return shots

    def skip(self, step, what: str, name: str, reason: str) -> None:
        """Record, on the step's recorded runs, that a value was seen but not kept, and why."""
        self.emitter.emit(step, [], self._into(Skipped(what, name, reason)))

    def record_step(self, step) -> None:
        """Every step the rule keeps is in the trace, even one with nothing else to record."""
        self.emitter.emit(step, [], self._into(StepMark()))

    def _into(self, capture):
        """The gate's callback for ``capture``: it writes straight into the trace."""
        return functools.partial(capture.into, self.trace)

    def record_shards(self, step, args, kwargs, devices: list[str]) -> None:
        """Each replica's shard: its size, and its examples' numbers from a field named
        ``index`` (:mod:`.values`); without one, fingerprints of the batch's rows."""
        found = [(path, v) for path, v in leaves({"args": args, "kwargs": kwargs or {}})
                 if is_per_replica(v)]
        if not found:
            return  # nothing was split among the replicas
        index = next(((path_name(p), v) for p, v in found if p[-1] == INDEX_FIELD), None)
        found = [(path_name(p), v) for p, v in found]
        if index is not None and why_not_an_index(index[1]):
            self.skip(step, "examples", index[0], why_not_an_index(index[1]))
            index = None
        batch = index or next(((n, v) for n, v in found if not why_not_a_batch(v)), None)
        if batch is None:
            self.skip(step, "shards", found[0][0], why_not_a_batch(found[0][1]))
            return
        capture = ShardCapture(batch[0], tuple(devices), index is not None)
        self.emitter.emit(step, components(batch[1]), self._into(capture))

    def record_outputs(self, step, result) -> None:
        """What each replica returned, by name; a value that cannot be kept is noted as skipped."""
        items = []
        for name, value in output_items(result):
            reason = next(filter(None, map(why_not_recorded, components(value))), None)
            if reason and value is not None:
                self.skip(step, "output", name, reason)
            elif not reason:
                items.append((name, components(value)))
        if items:
            capture = OutputCapture(tuple((name, len(parts)) for name, parts in items))
            self.emitter.emit(step, [t for _, parts in items for t in parts], self._into(capture))

    def record_sync(self, step) -> None:
        """After the step: does every replica's copy of each trainable mirrored variable agree?"""
        mirrored = [v for v in self.variables
                    if v.synchronization != tf.VariableSynchronization.ON_READ and v.trainable
                    and why_not_recorded(v) is None]
        if not mirrored:
            return
        policy = self.trace.recording
        capture = SyncCapture(
            tuple(self._names[id(v)] for v in mirrored),
            tuple(v.shape.num_elements() is not None
                  and policy.keeps_values(v.shape.num_elements()) for v in mirrored),
            tuple(len(v.values) for v in mirrored), tuple(v.aggregation.name for v in mirrored))
        # Each copy is read on its own device, on recorded steps only; the comparison is numpy's.
        copies = [Lazy(c.device, c.read_value) for v in mirrored for c in v.values]
        self.emitter.emit(step, copies, self._into(capture))
