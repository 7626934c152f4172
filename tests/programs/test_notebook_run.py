"""mt.show_program, mt.run_program and mt.straggle: what a chapter uses to show and run its
plain TensorFlow program, and the one line that makes a straggler."""

from __future__ import annotations

import pytest

from conftest import run_python

SCENARIO = r'''
import json, os, sys, tempfile
import mirrortutor as mt
mt.setup(2, quiet=True)
import numpy as np, tensorflow as tf
from mirrortutor.errors import InvalidQuantityError, ProgramError
report = {}
folder = tempfile.mkdtemp()
good = os.path.join(folder, "good.py")
open(good, "w").write(
    "import sys, tensorflow as tf\n"
    "strategy = tf.distribute.MirroredStrategy()\n"
    "with strategy.scope():\n"
    "    v = tf.Variable(1.0)\n"
    "@tf.function\n"
    "def step():\n"
    "    def replica():\n"
    "        context = tf.distribute.get_replica_context()\n"
    "        x = tf.cast(context.replica_id_in_sync_group, tf.float32) + v\n"
    "        return context.all_reduce('SUM', x)\n"
    "    return strategy.run(replica)\n"
    "total = strategy.experimental_local_results(step())[0].numpy()\n"
    "ARGS = sys.argv[1:]\n")
bad = os.path.join(folder, "bad.py")
open(bad, "w").write("import tensorflow as tf\nx = 1\nraise ValueError('the program said no')\n")
run = mt.run_program(good, "--steps", 3)
report["namespace"] = [float(run.namespace["total"]), run.namespace["ARGS"]]
report["recorded"] = [type(run.trace).__name__, len(run.traces)]
stock = mt.run_program(good, record=False)
report["stock"] = [len(stock.strategies), float(stock.namespace["total"])]
try:
    mt.run_program(bad)
except ValueError as exc:
    report["raised"] = [type(exc).__name__, str(exc), exc.mirrortutor_run.namespace.get("x")]
try:
    mt.run_program(os.path.join(folder, "missing.py"))
except ProgramError as exc:
    report["missing"] = str(exc)
from IPython.core.formatters import DisplayFormatter
shown = DisplayFormatter().format(mt.show_program(bad))[0]
report["shown"] = shown["text/plain"].strip() == open(bad).read().strip() and "raise" in shown["text/html"]
strategy = mt.MirroredStrategy(tf.config.list_logical_devices("CPU")[:2])
@tf.function
def slowed(x):
    return strategy.run(lambda x: mt.straggle(x, 0.01, replica=1), args=(x,))
data = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices(np.arange(4.0)).batch(4))
report["straggled"] = [list(map(float, np.concatenate([t.numpy() for t in
                       strategy.experimental_local_results(slowed(b))]))) for b in data]
for kwargs in ({"replica": 1, "worker": 0}, {}, {"replica": 0, "seconds": -1}):
    try:
        mt.straggle(tf.constant(1.0), **{"seconds": 0.1, **kwargs})
    except InvalidQuantityError as exc:
        report.setdefault("bad", []).append(str(exc)[:40])
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def report():
    import json
    done = run_python(SCENARIO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_run_program_gives_the_programs_variables_and_trace(report):
    assert report["namespace"] == [3.0, ["--steps", "3"]]
    assert report["recorded"] == ["Trace", 1]


def test_run_program_without_recording_is_stock_tensorflow(report):
    assert report["stock"] == [0, 3.0]


def test_a_program_that_raises_raises_its_own_error_with_its_variables_kept(report):
    assert report["raised"] == ["ValueError", "the program said no", 1]


def test_a_missing_program_is_a_plain_error(report):
    assert "There is no program at" in report["missing"]


def test_show_program_shows_the_source(report):
    assert report["shown"] is True


def test_straggle_hands_its_input_on_unchanged(report):
    assert report["straggled"] == [[0.0, 1.0, 2.0, 3.0]]


def test_straggle_with_bad_arguments_is_a_plain_error(report):
    assert len(report["bad"]) == 3
