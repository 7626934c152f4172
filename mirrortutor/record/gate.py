"""Getting values out of a running TensorFlow program without changing them.

Inside ``tf.function`` a tensor has no value yet, only a place in a graph. To see the value each
step we add a ``tf.numpy_function`` that receives the tensors and hands numpy copies to a Python
callback. It only *reads*: no value the training computes depends on it, so every number stays
bit-identical. A gate on the step counter (a conditional) keeps the callback, and the copies to
the host it needs, to the sampled steps. Under XLA (``jit_compile=True``), where Python callbacks cannot be
compiled, nothing is recorded and a warning says so.

What a gate costs on the steps it skips depends on how it is built. ``tf.cond`` is normally
"lowered" to ``Switch``/``Merge`` ops: one ``Switch`` per tensor held back, and any such op makes
TensorFlow's executor track dead branches for *every* op of the step. A tensor living on another
device than the gate also costs a transfer. So the gate is built per device, as one functional
``Case`` op that is not lowered (on CPU devices, where the callback can run in place; elsewhere it
is an ordinary ``tf.cond``), and inside ``strategy.run`` every recording point of the step shares
it (:meth:`Emitter.one_gate_per_device`). A small collector reassembles the devices' pieces in
Python before the callbacks run, in the order the program made them. Measured on 4 logical CPU
replicas: a lowered cond per recording point cost ~25 % of a 2.5 ms step; this costs ~2 %.

Each ``Case`` call, and each edge between devices (a send and a receive), is paid on every step,
recorded or not, so a gate has as few as it can: a CPU replica's part of at most :data:`FEW`
tensors (the loss reduced after the run) joins the host's part; a part waits for the previous
gate's part on its own device only, the collector keeping the callbacks in the program's order;
and the parts leave the program order TensorFlow gives stateful ops (which would chain them
across devices), a part that reads a variable still waiting for its updates.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from .folding import foldable, recomputed
from .tf_internals.graph import in_xla_context, independent, unlowered_case

Callback = Callable[..., None]  # callback(step: int, *arrays: np.ndarray)
FEW = 2  # a CPU replica's part of a gate with at most this many tensors joins the host's part


@dataclass(frozen=True)
class Lazy:
    """A tensor built only on recorded steps, on ``device`` (e.g. a variable's current value)."""

    device: str
    build: Callable[[], tf.Tensor]


XLA_MESSAGE = ("mirrortutor cannot record inside XLA-compiled functions, so this part of the run "
               "is missing from the trace. Pass jit_compile=False to model.compile() or "
               "tf.function() to see it.")

#: Devices treated as unable to run Python, as a GPU is (see :func:`treat_as_accelerators`).
_host_only: list[tf.DeviceSpec] = []


@contextlib.contextmanager
def treat_as_accelerators(devices: Sequence[str]):
    """While graphs are traced in this block, build the gates of ``devices`` as for a GPU.

    On a GPU a ``numpy_function`` cannot run in place: the gate there is an ordinary (lowered)
    ``tf.cond`` whose recording branch copies the tensors to the host CPU and runs the callback
    there. This switch lets a machine without a GPU build and run exactly that branch on its
    logical CPUs, so the tests cover it (``tests/record/test_gate.py``).
    """
    added = [tf.DeviceSpec.from_string(d) for d in devices]
    _host_only.extend(added)
    try:
        yield
    finally:
        del _host_only[len(_host_only) - len(added):]


def _canonical(device: str) -> str:
    return tf.DeviceSpec.from_string(device).to_string() if device else ""


def _matches(spec: tf.DeviceSpec, pattern: tf.DeviceSpec) -> bool:
    """``/device:CPU:1`` matches ``/job:localhost/replica:0/task:0/device:CPU:1``."""
    return all(getattr(pattern, f) in (None, getattr(spec, f))
               for f in ("job", "replica", "task", "device_type", "device_index"))


def _same_process(a: str, b: str) -> bool:
    """Whether two devices belong to one task (a transfer between them stays in the process)."""
    a, b = tf.DeviceSpec.from_string(a), tf.DeviceSpec.from_string(b)
    return (a.job, a.replica, a.task) == (b.job, b.replica, b.task)


def _movable(t) -> bool:
    """Whether ``t`` can be handed to a gate on another device: a plain tensor, not a variable
    or a resource handle (TF keeps those with their device), nor a sum the gate recomputes."""
    return isinstance(t, tf.Tensor) and t.dtype != tf.resource and not foldable(t)


def _runs_python(device: str) -> bool:
    """Whether a numpy_function can run on ``device`` itself (a CPU, logical or not)."""
    spec = tf.DeviceSpec.from_string(device)
    return spec.device_type == "CPU" and not any(_matches(spec, p) for p in _host_only)


class Emitter:
    """Sends tensors to Python callbacks on the steps a predicate keeps, eagerly or in graphs."""

    def __init__(self, host_device: str, keeps: Callable, warn: Callable[[str, str], None]):
        self.host_device = _canonical(host_device)  # where callbacks run for non-CPU devices
        self.keeps = keeps  # the sampling rule: step (int, or int64 tensor in graphs) -> keep it?
        self.warn = warn  # warn(message, cause): the trace's one warning channel
        self._last_keep = (None, None, None)  # (step, graph, (bool, int32)): built once per step
        self._batch = None  # (graph, items) while strategy.run is traced: one gate per device
        # graph -> its last gate's parts, by device
        self._after: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._gates = itertools.count()
        self._previous: dict[int, int] = {}  # gate -> the gate before it in its graph
        self._arrived: dict = {}  # (gate, step) -> {device group: values}, until all are in
        self._busy: set = set()  # (gate, step): all parts in, its callbacks not yet all run
        self._waiting: dict = {}  # (gate, step) -> runs of the next gate, to start when it is done
        self._lock = threading.Lock()

    def _keep(self, step):
        """This step's predicate, as a bool tensor and as a branch index (0 skip, 1 record)."""
        graph = tf.compat.v1.get_default_graph()  # a cond or loop body is a graph of its own: its own copy
        if self._last_keep[0] is not step or self._last_keep[1] is not graph:
            keep = self.keeps(step)
            self._last_keep = (step, graph, (keep, tf.cast(keep, tf.int32)))
        return self._last_keep[2]

    def emit(self, step, tensors: Sequence, callback: Callback, *, always: bool = False) -> None:
        """Call ``callback(step, *numpy_values)`` for this step, now or when the graph runs.

        ``tensors`` holds tensors or :class:`Lazy` ones; lazy tensors are built inside the
        recording branch, so their ops run only on recorded steps. ``always`` records whatever
        the step (a reduction outside any step: it is not sampled by the step rule).
        """
        tensors = list(tensors)
        if tf.executing_eagerly():
            if always or self.keeps(int(step)):
                values = [np.asarray(t.build() if isinstance(t, Lazy) else t) for t in tensors]
                self._safely(callback, int(step), values)
            return
        if in_xla_context():
            self.warn(XLA_MESSAGE, "XLA")
            return
        if (not always and self._batch is not None
                and self._batch[0] is tf.compat.v1.get_default_graph()):
            self._batch[1].append((tensors, callback))  # gated together when the step ends
            return
        self._gate(step, [(tensors, callback)], always=always)

    @contextlib.contextmanager
    def one_gate_per_device(self, step):
        """Collect every recording point of one traced step, and gate them together at the end."""
        if tf.executing_eagerly() or in_xla_context() or self._batch is not None:
            yield
            return
        self._batch = (tf.compat.v1.get_default_graph(), [])
        try:
            yield
            items = self._batch[1]
        finally:
            self._batch = None
        if items:
            self._gate(step, items)

    def _gate(self, step, items: list, always: bool = False) -> None:
        """One gate per device, each holding that device's tensors of every item (module doc)."""
        groups = self._parts(items)
        gate = next(self._gates)
        layout = [(i, j) for members in groups.values() for i, j, _ in members]
        sizes = [len(members) for members in groups.values()]
        deliver = functools.partial(self._deliver, gate, [cb for _, cb in items],
                                    [len(t) for t, _ in items], layout, sizes)
        graph = tf.compat.v1.get_default_graph()
        keep = (tf.constant(True), tf.constant(1)) if always else self._keep(step)
        # Callbacks run in the order of the program: a gate whose parts are all in waits for the
        # previous gate of its graph to be done (:meth:`_deliver`). That needs each part to run
        # after the previous gate's part on its own device (free: no transfer); with no device in
        # common, the first part waits for all of them (a dependency across devices costs a send
        # and a receive on every step).
        previous, before = self._after.get(graph, (None, {}))  # its id, its op on each device
        shared = [d for d in groups if d in before]
        if previous is not None:
            self._previous[gate] = previous
        parts = {}
        for g, (device, members) in enumerate(groups.items()):
            where = device if _runs_python(device) else self.host_device

            def record(members=members, g=g, where=where):
                values = [_build(t) for _, _, t in members]
                with tf.device(where):
                    return tf.numpy_function(functools.partial(deliver, g), [step, *values],
                                             tf.int64, stateful=True)

            def skip():
                return tf.constant(0, tf.int64)

            after = ([before[device]] if device in before
                     else list(before.values()) if g == 0 and not shared else [])
            # Outside the program order TF's automatic control dependencies give stateful ops
            # without a resource input (they would chain the devices' parts one after the other,
            # across devices); a part reading a variable stays ordered after its updates.
            with tf.device(device), tf.control_dependencies(after), independent():
                if _runs_python(device):  # one op, not lowered: see the module docstring
                    out = unlowered_case(keep[1], [skip, record])
                else:
                    out = tf.cond(keep[0], record, skip)
            parts[device] = out.op
        self._after[graph] = (gate, parts)

    def _parts(self, items: list) -> dict[str, list]:
        """``device -> [(item, position, tensor)]``: the gate's part on each device. A CPU
        replica's part of at most :data:`FEW` tensors (a loss, reduced after the run) joins the
        host's part when the host is a CPU too: a transfer between two CPUs of one process hands
        over the buffer, which costs less on every step than one more ``Case`` call."""
        groups: dict[str, list] = {}
        for i, (tensors, _) in enumerate(items):
            for j, t in enumerate(tensors):
                device = _canonical(t.device) or self.host_device
                groups.setdefault(device, []).append((i, j, t))
        host = self.host_device
        if _runs_python(host):
            for device in [d for d in groups
                           if d != host and _runs_python(d) and _same_process(d, host)]:
                # Only plain tensors move: a variable (its handle stays on its device), a lazy
                # tensor or a recomputed sum (built in the branch, on its device) never does.
                if len(groups[device]) <= FEW and all(_movable(t) for _, _, t in groups[device]):
                    groups.setdefault(host, []).extend(groups.pop(device))
        return groups or {host: []}

    def _deliver(self, gate, callbacks, counts, layout, sizes, group, step, *values):
        """One device's part of a gate arrived; when all have, and the gate before it in the
        graph is done, run the callbacks in order (else they run when that gate is done)."""
        step, key = int(step), (gate, int(step))
        with self._lock:
            parts = self._arrived.setdefault(key, {})
            parts[group] = values
            if len(parts) < len(sizes):
                stalled = []
                if len(self._arrived) > 256:  # a step that failed half-way never completes:
                    oldest = next(iter(self._arrived))  # forget it, and run what waited for it
                    del self._arrived[oldest]
                    stalled = self._waiting.pop(oldest, [])
            else:
                del self._arrived[key]
                self._busy.add(key)
                previous = (self._previous.get(gate), step)
                run = functools.partial(self._run, key, callbacks, counts, layout, parts)
                if previous in self._arrived or previous in self._busy:
                    self._waiting.setdefault(previous, []).append(run)
                    run = None
                stalled = [run] if run else []
        for run in stalled:  # outside the lock: callbacks take their time
            run()
        return np.int64(0)

    def _run(self, key, callbacks, counts, layout, parts) -> None:
        """A gate's callbacks, then those of the gates that waited for it."""
        try:
            flat = [v for g in range(len(parts)) for v in parts[g]]
            per_item: list[list] = [[None] * n for n in counts]
            for (i, j), v in zip(layout, flat):
                per_item[i][j] = v
            for callback, arrays in zip(callbacks, per_item):
                self._safely(callback, key[1], arrays)
        finally:
            with self._lock:
                self._busy.discard(key)
                later = self._waiting.pop(key, [])
            for run in later:
                run()

    def _safely(self, callback: Callback, step: int, values) -> None:
        """Run a recording callback; if it fails, say so, and never let training fail with it.

        Every value a callback cannot keep is recorded as skipped with its reason before it gets
        here, so this warning means a bug in mirrortutor: the tests turn it into an error.
        """
        try:
            callback(step, *values)
        except Exception as exc:  # a bug in recording must not stop a student's training
            self.warn(f"mirrortutor could not record step {step} ({type(exc).__name__}: {exc}); "
                      "training itself is unaffected.",
                      f"could not record: {getattr(callback, '__qualname__', callback)} "
                      f"{type(exc).__name__}")


def _build(t):
    """The value to hand to the callback, built inside the recording branch (module doc)."""
    if isinstance(t, Lazy):
        with tf.device(t.device):
            return t.build()
    return recomputed(t)
