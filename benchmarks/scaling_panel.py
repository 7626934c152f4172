"""How long does a class wait? Chapter 5's panel, timed on this machine.

The panel runs the training function the notebook defines; here, chapter 05's: one run of
programs/05_scaling.py through mt.run_program, on the chapter's digits.

1. Click → charts redrawn: one run at the panel's default settings, for 1 and 8 replicas.
2. A full default sweep (Sweep 1→8: replicas 1, 2, 4, 8 at the panel's defaults), end to end.

Logical CPU replicas share this machine's cores: these are waiting times here, not GPU speed.
Usage: python benchmarks/scaling_panel.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import mirrortutor as mt

DEVICES = mt.setup(8)
PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "05_scaling.py"
train, test = mt.data.load("digits").split(0.2, seed=0)
folder = tempfile.TemporaryDirectory()
DATA = Path(folder.name) / "digits.npz"
np.savez(DATA, x_train=train.x, y_train=train.y, x_test=test.x, y_test=test.y)


def run_training(replicas, lr_rule="linear", base_lr=0.05, per_replica_batch=16, epochs=6):
    """Chapter 05's function: one run of the program, as the charts' dict."""
    run = mt.run_program(PROGRAM, "--data", DATA, "--replicas", replicas, "--lr-rule", lr_rule,
                         "--base-lr", base_lr, "--per-replica-batch", per_replica_batch,
                         "--epochs", epochs)
    g = run.namespace
    return dict(label=f"{replicas} replica(s)", replicas=replicas,
                per_replica_batch=per_replica_batch, global_batch=g["global_batch_size"],
                steps_per_epoch=g["steps_per_epoch"], loss=g["history"].history["loss"],
                test_accuracy=g["test_accuracy"], step_s=statistics.median(g["step_seconds"]),
                parameters=g["model"].count_params())


lab = mt.widgets.ScalingLab(run_training, DEVICES)
lab.run(replicas=1)  # warm TF's own caches, as a class would have by chapter 5
for n in (1, 8):
    start = time.perf_counter()
    lab.run(replicas=n)
    print(f"click → charts redrawn, {n} replica(s): {time.perf_counter() - start:5.1f} s")

lab.clear()
start = time.perf_counter()
lab.sweep()
print(f"full default sweep 1→8 (replicas {[r['replicas'] for r in lab.results]}, "
      f"{lab.epochs.value} epochs each): {time.perf_counter() - start:5.1f} s")
