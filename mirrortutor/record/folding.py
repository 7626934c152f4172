"""Sums a recording tap must not touch: grappler may fold them, and a second consumer moves bits.

The recorder's gates (:mod:`.gate`) and timestamps (:mod:`.stamps`) only read tensors, but reading
one is consuming it, and for a sum or product that can change what TensorFlow computes (below).
Such a tensor is never tapped: a gate recomputes it in its branch (:func:`recomputed`), and a
timestamp waits for its inputs instead (:func:`settled`).
"""

from __future__ import annotations

import tensorflow as tf

#: Ops whose output grappler's arithmetic optimizer may fold into the sum or product that consumes
#: it, but only while that output has one consumer and drives no control dependency
#: (``AddOpsRewriteStage`` and ``MinimizeBroadcasts`` in
#: tensorflow/core/grappler/optimizers/arithmetic_optimizer.cc, ``IsAbsorbableByOptimizedNodesGroup``:
#: ``NumNonControlOutputs(node) != 1`` or ``DrivesControlDependency(node)`` → not absorbed). Folding
#: reorders the additions, so a tap that became a second consumer changed the last bit of a reduced
#: loss (seen: a GAN-style loop's ``strategy.reduce("SUM", loss)``). Such a tensor is never tapped
#: itself: the gate recomputes it inside its branch from its inputs (the same kernel on the same
#: values: the same bits), and a timestamp waits for its inputs (:func:`settled`).
FOLDABLE = {"Add": tf.raw_ops.Add, "AddV2": tf.raw_ops.AddV2, "Mul": tf.raw_ops.Mul}


def foldable(t) -> bool:
    op = getattr(t, "op", None)
    return (op is not None and not tf.executing_eagerly() and not op.control_inputs
            and len(op.outputs) == 1 and (op.type == "AddN" or op.type in FOLDABLE))


def settled(tensors: list) -> list:
    """What to wait for to know ``tensors`` are computed, without a control dependency on a
    tensor grappler may fold (its inputs instead, one add or multiply earlier)."""
    out = []
    for t in tensors:
        out += settled(list(t.op.inputs)) if foldable(t) else [t]
    return out


def recomputed(t):
    """``t`` itself, or, for a sum or product grappler may fold, the same op on its inputs."""
    if not foldable(t):
        return t
    op = t.op
    with tf.device(op.device):
        if op.type == "AddN":
            return tf.raw_ops.AddN(inputs=[recomputed(x) for x in op.inputs])
        x, y = op.inputs
        return FOLDABLE[op.type](x=recomputed(x), y=recomputed(y))
