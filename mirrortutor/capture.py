"""Getting values out of a running TensorFlow program without changing them.

Inside ``tf.function`` a tensor has no value yet, only a place in a graph. To see the value each
step we add a ``tf.numpy_function`` that receives the tensors and hands numpy copies to a Python
callback. It only *reads*: no value the training computes depends on it, so every number stays
bit-identical. A ``tf.cond`` on the step counter keeps the callback (and the copies to the host it
needs) to the sampled steps. Under XLA (``jit_compile=True``), where Python callbacks cannot be
compiled, nothing is recorded and a warning says so.
"""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_util

Callback = Callable[..., None]  # callback(step: int, *arrays: np.ndarray)


def in_xla_context() -> bool:
    """True while building a graph that XLA will compile (no Python callbacks possible)."""
    return bool(control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()))


_warned_xla = False


def warn_xla_once() -> None:
    global _warned_xla
    if not _warned_xla:
        _warned_xla = True
        warnings.warn(
            "mirrortutor cannot record inside XLA-compiled functions, so this part of the run is "
            "missing from the trace. Pass jit_compile=False to model.compile() or tf.function() "
            "to see it.",
            stacklevel=3,
        )


class Emitter:
    """Sends tensors to Python callbacks on the steps a predicate keeps, eagerly or in graphs."""

    def __init__(self, host_device: str, keeps: Callable[[int], bool], keeps_tensor: Callable):
        self.host_device = host_device  # where the callbacks run: the host CPU
        self.keeps = keeps  # step (int) -> record it?  (eager)
        self.keeps_tensor = keeps_tensor  # step (tensor) -> bool tensor  (graphs)
        self._last_keep = (None, None, None)  # (step, graph, predicate): built once per step

    def _keep(self, step):
        graph = ops.get_default_graph()  # a cond or loop body is a graph of its own: its own copy
        if self._last_keep[0] is not step or self._last_keep[1] is not graph:
            self._last_keep = (step, graph, self.keeps_tensor(step))
        return self._last_keep[2]

    def emit(self, step, tensors: Sequence, callback: Callback, *, always: bool = False) -> None:
        """Call ``callback(step, *numpy_values)`` for this step, now or when the graph runs.

        ``tensors`` may be tensors or callables returning a list of tensors; callables are built
        inside the recording branch, so their ops run only on recorded steps.
        """
        if tf.executing_eagerly():
            if always or self.keeps(int(step)):
                values = [np.asarray(t) for t in _materialise(tensors)]
                _safely(callback, int(step), values)
            return
        if in_xla_context():
            warn_xla_once()
            return

        def record():
            with tf.device(self.host_device):
                flat = _materialise(tensors)

                def call(s, *values):
                    _safely(callback, int(s), values)
                    return np.int64(0)

                return tf.numpy_function(call, [step, *flat], tf.int64, stateful=True)

        if always:
            record()
        else:
            tf.cond(self._keep(step), record, lambda: tf.constant(0, tf.int64))


def _safely(callback: Callback, step: int, values) -> None:
    """Run a recording callback; if it fails, warn, and never let training fail with it."""
    try:
        callback(step, *values)
    except Exception as exc:  # a bug in recording must not stop a student's training
        warnings.warn(f"mirrortutor could not record step {step} ({type(exc).__name__}: {exc}); "
                      "training itself is unaffected.", stacklevel=2)


def _materialise(tensors) -> list:
    if callable(tensors):
        return list(tensors())
    return list(tensors)
