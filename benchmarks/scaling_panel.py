"""How long does a class wait? Chapter 5's panel, timed on this machine.

1. Click → first chart update: the panel redraws its loss chart after every epoch, so this is the
   time from the start of a run to its first epoch's redraw (model build, tf.function tracing,
   one epoch), at the panel's default settings, for 1 and 8 replicas.
2. A full default sweep (Sweep 1→8: replicas 1, 2, 4, 8 at the panel's defaults), end to end.

Logical CPU replicas share this machine's cores: these are waiting times here, not GPU speed.
Usage: python benchmarks/scaling_panel.py
"""

from __future__ import annotations

import time

import mirrortutor as mt

DEVICES = mt.setup(8)


def first_update_seconds(replicas: int) -> float:
    start = time.perf_counter()
    seen: list[float] = []

    def on_update(result):
        if not seen:
            seen.append(time.perf_counter() - start)
        lab._redraw(lab.loss_chart, mt.widgets.loss_chart([result]))  # what the panel does

    mt.experiments.run_scaling(lab.config(replicas=replicas), devices=DEVICES, on_update=on_update)
    return seen[0]


lab = mt.widgets.ScalingLab(devices=DEVICES)
first_update_seconds(1)  # warm TF's own caches, as a class would have by chapter 5
for n in (1, 8):
    print(f"click → first chart update, {n} replica(s): {first_update_seconds(n):5.1f} s")

start = time.perf_counter()
lab.sweep()
print(f"full default sweep 1→8 (replicas {[r.config.replicas for r in lab.results]}, "
      f"{lab.epochs.value} epochs each): {time.perf_counter() - start:5.1f} s")
