"""TensorFlow's cross-device implementations by name, and the plain words for what goes wrong.

``tf.distribute`` strategies hand every reduction to a cross-device implementation
(``CollectiveAllReduce``, ``ReductionToOneDevice``, ``HierarchicalCopyAllReduce``, ...); a
pass-through wrapper (:class:`~mirrortutor.record.tf_internals.hooks.PassThroughCrossDeviceOps`)
sits in front of the real one and tells the recorder (:mod:`.recorder`). This module names the
implementations (:data:`IMPLEMENTATIONS`, :func:`cross_device_ops`) and says in plain words, before
TensorFlow's ``AddN`` does, when per-replica values cannot be reduced (:func:`check_same_shapes`).
"""

from __future__ import annotations

import tensorflow as tf

from ..errors import BatchSplitError, UnknownAlgorithmError

#: The cross-device implementations TensorFlow offers, by class name; "default" lets TF choose
#: (collectives: RING on CPUs, NCCL on GPUs, since TF 2.13). One vocabulary for the whole package.
IMPLEMENTATIONS = ("default", "ReductionToOneDevice", "HierarchicalCopyAllReduce", "NcclAllReduce")


def cross_device_ops(name: str) -> tf.distribute.CrossDeviceOps | None:
    """The ``cross_device_ops=`` argument for implementation ``name`` (None: TF's default)."""
    if name not in IMPLEMENTATIONS:
        raise UnknownAlgorithmError(f"unknown implementation {name!r}; expected one of "
                                    f"{IMPLEMENTATIONS} (TF's cross_device_ops class names, or "
                                    "'default' for TensorFlow's own choice).")
    return None if name == "default" else getattr(tf.distribute, name)()


def check_same_shapes(values: list[list]) -> None:
    """Per-replica tensors (``[value][replica]``) of different shapes cannot be summed: say why,
    before TF's AddN does."""
    for tensors in values:
        shapes = [tf.TensorShape(getattr(t, "shape", None)) for t in tensors]
        if len(shapes) < 2 or not all(s.is_fully_defined() for s in shapes):
            continue
        if len({tuple(s.as_list()) for s in shapes}) > 1:
            sizes = [s.as_list()[0] if s.rank else None for s in shapes]
            raise BatchSplitError(
                f"The replicas' values have different shapes ({', '.join(str(s) for s in shapes)}), "
                f"so they cannot be added up element by element (axis=None). This happens when a "
                f"global batch does not divide evenly among {len(shapes)} replicas (here: {sizes} "
                "examples). Keras 3.15's fit() and evaluate() reduce the FIRST batch of each call "
                "this way, validation_data included (TensorFlowTrainer._maybe_symbolic_build), so "
                "that batch must split evenly: make the global batch size a multiple of "
                f"{len(shapes)}, and give the call at least one full global batch (a shorter "
                "dataset is one short batch, which may not split evenly even when its size is a "
                f"multiple of {len(shapes)}). drop_remainder=True drops only the last, short "
                "batch: it cannot even out a batch that never splits evenly. For "
                "strategy.reduce, axis=0 (reduce along the batch) works with uneven shards."
            )
