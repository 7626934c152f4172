"""How long do the course's clusters take to start? Printed, never asserted.

- the cluster agent and the multi-worker launcher: a fresh interpreter importing the module it
  runs (what every child process pays before doing anything);
- ``mt.LocalCluster(workers=2, ps=1)`` from ``start()`` to a connected coordinator
  (``cluster.info.start_seconds``), in fresh interpreters;
- a 2-worker ``mt.MultiWorkerCluster`` run of a one-step plain TF program
  (``tests/clusters/programs/steps.py``), from launch to every worker's result.

Times are wall-clock on this machine (2 shared cores here): compare runs of the same machine.
Usage: python benchmarks/cluster_start.py [--repeats N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEATS = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 3


def fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def import_seconds(module: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return time.perf_counter() - start


def median(values) -> str:
    values = list(values)
    return f"{statistics.median(values):6.2f} s (of {len(values)}: " + \
        ", ".join(f"{v:.2f}" for v in values) + ")"


LOCAL = """
import warnings; warnings.simplefilter("ignore")
import mirrortutor as mt
mt.setup(2, quiet=True)
with mt.LocalCluster(workers=2, ps=1) as cluster:
    print(cluster.info.start_seconds)
"""

STEPS = Path(__file__).resolve().parents[1] / "tests" / "clusters" / "programs" / "steps.py"

MULTI = f"""
import warnings, time; warnings.simplefilter("ignore")
import mirrortutor as mt
with mt.MultiWorkerCluster(workers=2) as cluster:
    run = cluster.run_program({str(STEPS)!r}, "--steps", "1", record=False)
    assert run.ok, run.summary()
    print(run.seconds)
"""

if __name__ == "__main__":
    print(f"python {sys.version.split()[0]}; median of {REPEATS} fresh interpreters each")
    for module in ("mirrortutor.clusters.agent", "mirrortutor.clusters.launcher"):
        print(f"import {module:32s} {median(import_seconds(module) for _ in range(REPEATS))}")
    print(f"{'LocalCluster(2 workers, 1 ps) start':39s} "
          f"{median(float(fresh(LOCAL)) for _ in range(REPEATS))}")
    print(f"{'MultiWorkerCluster 2 workers, 1-step run':39s} "
          f"{median(float(fresh(MULTI)) for _ in range(REPEATS))}")
