"""The wall, graph half: TensorFlow's private API for building the recording's own graph pieces.

The recorder's gates (:mod:`~mirrortutor.record.gate`) and timestamps
(:mod:`~mirrortutor.record.stamps`) add a few ops to a step's graph; three things they need have no
public API. Checked against TensorFlow 2.21; each use says *why*.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf
# Why: a recording branch must be one un-lowered Case op (see record/gate.py), and must know
# whether XLA will compile the graph (no Python callbacks there); tf.cond/tf.switch_case lower.
from tensorflow.python.ops import cond_v2, control_flow_util
# Why: a sleep that runs on the device executing a step (stragglers); TF has no public sleep op.
from tensorflow.python.data.experimental.ops import testing as data_testing

__all__ = ["data_sleep", "in_xla_context", "independent", "unlowered_case"]


def in_xla_context() -> bool:
    """True while building a graph that XLA will compile (no Python callbacks possible)."""
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def unlowered_case(index, branches: list):
    """``tf.switch_case`` as one functional ``Case`` op that is not lowered to Switch/Merge."""
    return cond_v2.indexed_case(index, branches, lower_using_switch_merge=False)


def independent(value=None):
    """Let the stateful op making tensor ``value`` (a timestamp) run once its inputs are ready;
    as a context manager (``with independent():``), every such op made in the block.

    Why private: inside tf.function, automatic control dependencies chain every stateful op that
    uses no resource in program order, so replica 1's timestamp (or a straggler's sleep) would wait
    for replica 0's. ``run_independently`` is how TF's own TPU enqueue ops leave that chain."""
    graph = tf.compat.v1.get_default_graph() if value is None else getattr(value, "graph", None)
    acd = None if tf.executing_eagerly() else getattr(graph, "experimental_acd_manager", None)
    if value is None:
        return _independent_block(graph, acd)
    if acd is not None:
        acd.run_independently(value.op)
    return value


@contextlib.contextmanager
def _independent_block(graph, acd):
    before = len(graph.get_operations()) if acd is not None else 0
    yield
    for op in (graph.get_operations()[before:] if acd is not None else []):
        if op.op_def.is_stateful and all(t.dtype != tf.resource for t in op.inputs):
            acd.run_independently(op)


def data_sleep(microseconds):
    """A dataset transformation sleeping ``microseconds`` before each element (and the end)."""
    return data_testing.sleep(microseconds)
