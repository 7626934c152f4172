"""The swap test: every program the chapters run also runs on stock TensorFlow.

A chapter's training is a plain TensorFlow program under ``programs/`` that the notebook shows
and then runs with mirrortutor's recording strategies put in place of ``tf.distribute``'s
(``mt.run_program``). Take mirrortutor away and the program must still run, and compute the same
thing: here each program runs twice in fresh interpreters, once with the substitution (as the
chapter runs it) and once without (stock ``tf.distribute``), on the same logical CPU devices. A
synchronous program must print the same bytes and end with bit-identical weights both ways.

A multi-worker program (``Swap(workers=N)``) runs as its chapter runs it: in ``N`` worker processes
of an ``mt.MultiWorkerCluster`` (``cluster.run_program``), each with its TF_CONFIG, recorded and
stock. It gets ``--out DIR`` and writes each worker's final weights there (``weights-<task>.npz``);
every worker must print the same bytes both ways and end with bit-identical weights, the same on
every worker.

Every file in ``programs/`` must be listed in :data:`PROGRAMS`, with the arguments of a short run
(several runs of one file: a tuple of ``Swap``). ``{tmp}`` in ``args`` and ``prepare`` is the
test's temporary folder; ``prepare`` is Python run first (e.g. writing the data file the notebook
writes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from conftest import run_python

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Swap:
    """How the swap test runs one program."""

    replicas: int  # logical CPU devices made before TensorFlow starts (mt.setup)
    args: list[str] = field(default_factory=list)  # its command line: a short run
    weights: str = "model"  # the Keras model in the program's globals whose weights must match
    workers: int = 0  # 0: run in one process (mt.run_program); N: in N worker processes
    prepare: str = ""  # Python run before the program, {tmp} being the test's folder


#: Chapter 08's data file: the notebook saves mt.data.load("digits").take(512) the same way.
DIGITS = ("import numpy as np, mirrortutor as mt\n"
          "d = mt.data.load('digits').take(512)\n"
          "np.savez('{tmp}/train.npz', x=d.x, y=d.y)\n")

#: Every program the chapters run, and a short run of it.
PROGRAMS: dict[str, Swap | tuple[Swap, ...]] = {
    "custom_loop.py": Swap(replicas=4),
    "05_scaling.py": Swap(replicas=4, args=["--replicas", "4", "--epochs", "2", "--lr-rule",
                                            "warmup"]),
    "08_worker.py": (Swap(replicas=2, args=["--data", "{tmp}/train.npz", "--steps", "6"],
                          prepare=DIGITS),  # one machine: MirroredStrategy, as the reference
                     Swap(replicas=1, workers=2, prepare=DIGITS, args=[
                         "--data", "{tmp}/train.npz", "--steps", "6", "--checkpoint-dir",
                         "{tmp}/ckpt", "--checkpoint-every", "3"])),
    "10_train.py": (Swap(replicas=3, args=["--strategy", "mirrored", "--global-batch", "24",
                                           "--epochs", "1"]),
                    Swap(replicas=1, workers=2, args=["--strategy", "multiworker",
                                                      "--global-batch", "24", "--epochs", "1"])),
}
RUNS = [(name, i) for name, swaps in PROGRAMS.items()
        for i in range(len(swaps) if isinstance(swaps, tuple) else 1)]


def _swap(name: str, i: int) -> Swap:
    swaps = PROGRAMS[name]
    return swaps[i] if isinstance(swaps, tuple) else swaps

DRIVER = r'''
import json, sys
import numpy as np
import mirrortutor as mt
{prepare}
mt.setup({replicas}, quiet=True)
from mirrortutor.record.program import run_program
run = run_program({path!r}, {args!r}, out=None, record={record})
if run.error is not None or run.exit_code:
    sys.stderr.write(run.error_text)
    sys.exit(3)
kinds = sorted({{"mirrortutor" if any(c.__module__.startswith("mirrortutor")
                                      for c in type(s).__mro__) else "tensorflow"
                 for s in run.strategies}})
model = run.namespace.get({weights!r})
np.savez({out!r}, *(model.get_weights() if model is not None else []))
sys.stderr.write("STRATEGIES " + json.dumps(kinds) + "\n")
'''


#: A multi-worker program: every worker's stdout, and its weights from --out, per worker.
CLUSTER_DRIVER = r'''
import glob, json, os, sys
import numpy as np
import mirrortutor as mt
{prepare}
out = {out!r}
with mt.MultiWorkerCluster(workers={workers}) as cluster:
    run = cluster.run_program({path!r}, *{args!r}, "--out", out, record={record})
if not run.ok:
    sys.stderr.write(run.summary() + "\n" + "\n".join(w.stderr_tail for w in run.workers))
    sys.exit(3)
print(json.dumps([w.stdout for w in run.workers]))
kinds = ["mirrortutor"] if run.traces is not None else []
arrays = {{}}
for i, path in enumerate(sorted(glob.glob(os.path.join(out, "weights-*.npz")))):
    with np.load(path) as w:
        arrays.update({{f"{{i}}_{{k}}": w[k] for k in w.files}})
np.savez(out + ".npz", **arrays)
sys.stderr.write("STRATEGIES " + json.dumps(kinds) + "\n")
'''


def _run(name: str, swap: Swap, record: bool, out: Path):
    tmp = out.parent / ("recorded" if record else "stock")  # each run its own data, checkpoints
    tmp.mkdir(exist_ok=True)
    tmp = str(tmp)
    args = [a.replace("{tmp}", tmp) for a in swap.args]
    prepare = swap.prepare.replace("{tmp}", tmp)
    if swap.workers:
        code = CLUSTER_DRIVER.format(workers=swap.workers, path=str(ROOT / "programs" / name),
                                     args=args, record=record, out=str(out.with_suffix("")),
                                     prepare=prepare)
        done = run_python(code, timeout=600)
        assert done.returncode == 0, f"{name} (record={record}) failed:\n{done.stderr[-3000:]}"
        kinds = json.loads(done.stderr.rsplit("STRATEGIES ", 1)[1].splitlines()[0])
        with np.load(out) as weights:  # {worker}_{array}: one list of arrays per worker
            per_worker: dict[str, list] = {}
            for k in weights.files:
                per_worker.setdefault(k.split("_")[0], []).append(weights[k])
        workers = [per_worker[w] for w in sorted(per_worker)]
        assert len(workers) == swap.workers, f"{name} wrote weights for {len(workers)} workers"
        for other in workers[1:]:  # synchronous: every worker holds the same weights
            assert all(np.array_equal(a, b) for a, b in zip(workers[0], other))
        return done.stdout, kinds, workers[0]
    code = DRIVER.format(replicas=swap.replicas, path=str(ROOT / "programs" / name),
                         args=args, record=record, weights=swap.weights, out=str(out),
                         prepare=prepare)
    done = run_python(code, timeout=600)
    assert done.returncode == 0, f"{name} (record={record}) failed:\n{done.stderr[-3000:]}"
    kinds = json.loads(done.stderr.rsplit("STRATEGIES ", 1)[1].splitlines()[0])
    with np.load(out) as weights:
        return done.stdout, kinds, [weights[k] for k in weights.files]


def test_every_program_is_swap_tested():
    programs = {p.name for p in (ROOT / "programs").glob("*.py")}
    assert programs == set(PROGRAMS), (
        f"programs/ and the swap test's list differ: not listed {sorted(programs - set(PROGRAMS))}, "
        f"listed but missing {sorted(set(PROGRAMS) - programs)}")


@pytest.mark.parametrize("name, i", sorted(RUNS))
def test_program_runs_the_same_without_mirrortutor(name, i, tmp_path):
    swap = _swap(name, i)
    recorded = _run(name, swap, True, tmp_path / "recorded.npz")
    stock = _run(name, swap, False, tmp_path / "stock.npz")
    assert recorded[1] == ["mirrortutor"], f"the recorded run used {recorded[1]}"
    assert stock[1] == [], f"the stock run recorded {stock[1]}"
    assert recorded[0] == stock[0], "the program printed different things with and without " \
                                    "mirrortutor"
    assert len(recorded[2]) == len(stock[2]) > 0, f"{name} left no {swap.weights!r} to compare"
    for a, b in zip(recorded[2], stock[2]):
        assert np.array_equal(a, b), f"{name}: weights differ with and without mirrortutor"
