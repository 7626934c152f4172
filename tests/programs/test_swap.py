"""The swap test: every program the chapters run also runs on stock TensorFlow.

A chapter's training is a plain TensorFlow program under ``programs/`` that the notebook shows
and then runs with mirrortutor's recording strategies put in place of ``tf.distribute``'s
(``mt.run_program``). Take mirrortutor away and the program must still run, and compute the same
thing: here each program runs twice in fresh interpreters, once with the substitution (as the
chapter runs it) and once without (stock ``tf.distribute``), on the same logical CPU devices. A
synchronous program must print the same bytes and end with bit-identical weights both ways.

Every file in ``programs/`` must be listed in :data:`PROGRAMS`, with the arguments of a short run.
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


#: Every program the chapters run, and a short run of it.
PROGRAMS: dict[str, Swap] = {
    "custom_loop.py": Swap(replicas=4),
    "10_train.py": Swap(replicas=3, args=["--strategy", "mirrored", "--global-batch", "24",
                                          "--epochs", "1"]),
}

DRIVER = r'''
import json, sys
import numpy as np
import mirrortutor as mt
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


def _run(name: str, swap: Swap, record: bool, out: Path):
    code = DRIVER.format(replicas=swap.replicas, path=str(ROOT / "programs" / name),
                         args=swap.args, record=record, weights=swap.weights, out=str(out))
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


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_the_same_without_mirrortutor(name, tmp_path):
    swap = PROGRAMS[name]
    recorded = _run(name, swap, True, tmp_path / "recorded.npz")
    stock = _run(name, swap, False, tmp_path / "stock.npz")
    assert recorded[1] == ["mirrortutor"], f"the recorded run used {recorded[1]}"
    assert stock[1] == [], f"the stock run recorded {stock[1]}"
    assert recorded[0] == stock[0], "the program printed different things with and without " \
                                    "mirrortutor"
    assert len(recorded[2]) == len(stock[2]) > 0, f"{name} left no {swap.weights!r} to compare"
    for a, b in zip(recorded[2], stock[2]):
        assert np.array_equal(a, b), f"{name}: weights differ with and without mirrortutor"
