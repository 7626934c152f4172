"""The custom training loop in TensorFlow's own ``tf.distribute.MultiWorkerMirroredStrategy``
docstring, run as its docstring gives it (TensorFlow 2.21.0:
tensorflow/python/distribute/collective_all_reduce_strategy.py, class
``CollectiveAllReduceStrategy``).

The program is read from the installed TensorFlow's source at run time (nothing of it is copied
here): the docstring's code blocks, fenced by three backticks, are taken in order, the edits in
``EDITS`` are applied, each one a whole-line replacement that must match exactly once, and the
result runs as one program: a Keras ``fit``, then the docstring's own training loop. Without
``TF_CONFIG`` the strategy is a one-worker job, with one replica on the CPU
(``CollectiveAllReduceExtended._initialize_local_devices``: one CPU device when there is no GPU).
The driver prints what the program leaves behind: fit's losses (``model.history``, which Keras's
History callback sets) as exact floats, and the trained weights, bit for bit.

As written, the docstring's loop changes nothing: its loss reads the Dense layer's raw outputs as
probabilities (``from_logits`` is False), and every gradient it computes is exactly 0.0. A trace
of it shows that (``trace.gradients(step)``: norm 0.0 at each loop step), and the weights it
prints are the ones fit left.

    python tf_docstring_loop.py
    python -m mirrortutor record tf_docstring_loop.py
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import linecache
import re
import textwrap
from pathlib import Path

import numpy as np
import tensorflow as tf

#: where ``tf.distribute.MultiWorkerMirroredStrategy`` is defined (tf_export's name for it)
MODULE, CLASS = "tensorflow.python.distribute.collective_all_reduce_strategy", \
    "CollectiveAllReduceStrategy"

#: (line in the docstring, what runs instead, why). Nothing else is changed.
EDITS = [
    # The docstring's first block is a TF_CONFIG for a two-worker job on fixed ports; this run is
    # the one-worker job TensorFlow makes without TF_CONFIG, so it is not set. (As a two-worker
    # job, on free ports, the docstring's fit fails in plain TF 2.21 / Keras 3.15.1: "Attempt to
    # convert a value (PerReplica:{...}) with an unsupported type ... to a Tensor".)
    ("TF_CONFIG = '{\"cluster\": {\"worker\": [\"localhost:12345\", \"localhost:23456\"]},",
     "pass  # TF_CONFIG: not set, a one-worker job"),
    ("\"task\": {\"type\": \"worker\", \"index\": 0} }'", ""),
    # Local data, seeded: the docstring's dataset_fn draws from numpy's global generator, and the
    # model's initial weights come from Keras's; the same seed makes plain and recorded runs equal.
    ("strategy = tf.distribute.MultiWorkerMirroredStrategy()",
     "keras.utils.set_random_seed(0)\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()"),
    # Keras 3: compile() with no arguments fails twice. Its default optimizer ("rmsprop") is built
    # where compile() is called (keras/src/trainers/trainer.py, Trainer.compile:
    # optimizers.get(optimizer)), outside the strategy's scope, and fit() then raises "Mixing
    # different tf.distribute.Strategy objects"; and with no loss, fit() raises "No loss to
    # compute" (Trainer.compute_loss). The docstring's own optimizer, made in the scope, and its
    # loop's loss are what it passes.
    ("model.compile()",
     "model.compile(optimizer=optimizer, loss=tf.keras.losses.sparse_categorical_crossentropy)"),
    # The docstring's dataset repeats for ever, so fit() needs an epoch length to end (in any
    # Keras); verbose=0 keeps its progress bar, which prints wall-clock times, off stdout.
    ("model.fit(dist_dataset)", "model.fit(dist_dataset, steps_per_epoch=2, verbose=0)"),
    # The loop's names the docstring leaves to the reader: an iterator over the distributed
    # dataset, and a number of steps.
    ("for _ in range(NUM_STEP):",
     "iterator = iter(dist_dataset)\nfor _ in range(4):"),
]


def docstring() -> str:
    """The class's docstring, read from TensorFlow's source file: ``tf.distribute.
    MultiWorkerMirroredStrategy`` itself may be a stand-in while the program runs (that is what
    ``mirrortutor record`` does), and a stand-in has its own docstring."""
    path = importlib.util.find_spec(MODULE).origin
    tree = ast.parse(Path(path).read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS]
    return ast.get_docstring(cls)


def program() -> str:
    """The docstring's code blocks, in order, with ``EDITS`` applied line by line."""
    doc = docstring()
    source = "\n".join(textwrap.dedent(b) for b in re.findall(r"```\n(.*?)```", doc, re.S))
    lines = source.splitlines()
    for old, new, *_ in EDITS:
        hits = [i for i, line in enumerate(lines) if line.strip() == old]
        if len(hits) != 1:
            raise SystemExit(f"the docstring changed: {old!r} found {len(hits)} times")
        indent = lines[hits[0]][: len(lines[hits[0]]) - len(lines[hits[0]].lstrip())]
        lines[hits[0]] = "\n".join(indent + part for part in new.split("\n"))
    return "\n".join(lines)


if __name__ == "__main__":
    import keras

    source, name = program(), "<tf.distribute.MultiWorkerMirroredStrategy.__doc__>"
    # AutoGraph converts a tf.function from its source, which it finds through linecache.
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace = {"tf": tf, "np": np, "keras": keras, "__name__": "__main__"}
    exec(compile(source, name, "exec"), namespace)
    model = namespace["model"]
    print("fit loss", [repr(float(x)) for x in model.history.history["loss"]])
    weights = model.get_weights()
    for w in weights:
        print(w.dtype, w.shape, w.tobytes().hex())
    print("weights", hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest())
