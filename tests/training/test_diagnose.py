"""mt.diagnose names each of the four causes when it is produced on purpose, and an input-bound
pipeline becomes compute-bound once fixed. Margins are wide: the runs share two busy cores."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from helpers import mlp_step

READ_S = 0.2  # a slow read: 200 ms per batch, a sleep standing for a slow disk (no CPU work);
#              well above the step's ~50 ms of compute on 2 busy cores, which 60 ms was not


def read_slowly(e):
    x = tf.numpy_function(lambda v: (time.sleep(READ_S), v)[1], [e.x], tf.float32)
    return mt.data.Example(e.index, tf.ensure_shape(x, [None, 64]), e.y)


def custom_step(strategy, width: int, global_batch: int, pipeline=None, compiled: bool = True,
                after_grads=None):
    """A training step of a two-hidden-layer MLP; the iterator is read inside the step."""
    data = mt.data.digits().take(4 * global_batch).to_tf()
    data = (pipeline or (lambda ds: ds.batch(global_batch, drop_remainder=True)))(data)
    return mlp_step(strategy, width, global_batch, data, compiled=compiled,
                    after_grads=after_grads)


def timing(devices, n):
    return mt.MirroredStrategy(devices[:n], recording=mt.Recording.timing())


@pytest.fixture(autouse=True)
def no_pipeline_left_running():
    """After each test, free its iterators: a tf.data thread still inside a Python function (the
    slow read) when the interpreter exits would keep it from exiting."""
    yield
    gc.collect()


def test_a_slow_pipeline_is_input_bound_and_compute_bound_once_fixed(devices):
    """A 200 ms read per batch: input dominates; parallel reads and cache() after them: the input
    share falls below 30 %, the replicas mostly compute, and the step is over twice as fast."""
    slow = lambda ds: ds.batch(256, drop_remainder=True).map(read_slowly)  # noqa: E731
    fixed = lambda ds: ds.batch(256, drop_remainder=True).map(  # noqa: E731
        read_slowly, num_parallel_calls=tf.data.AUTOTUNE).cache().prefetch(tf.data.AUTOTUNE)
    s = timing(devices, 2)
    before = mt.diagnose(s, custom_step(s, 1024, 256, slow), steps=8)
    assert before.cause == "input", before.report()
    assert before.input_s > 0.5 * before.step_s, before.report()
    s = timing(devices, 2)
    after = mt.diagnose(s, custom_step(s, 1024, 256, fixed), steps=8, warmup=6)  # cached by then
    assert after.cause != "input" and after.input_s < 0.3 * after.step_s, after.report()
    assert after.compute_s == max(after.compute_s, after.outside_s, *after.costs().values()), \
        after.report()
    assert after.step_s < 0.5 * before.step_s


def test_a_large_model_with_a_tiny_batch_is_communication_bound(devices):
    """4.3 M parameters, one example per replica: the all-reduce is the largest cause."""
    s = timing(devices, 4)
    d = mt.diagnose(s, custom_step(s, 2048, 4), steps=6)
    assert d.cause == "communication", d.report()
    assert d.allreduce_s > 0.25 * d.step_s


def test_a_straggler_is_named_from_what_already_ran(devices):
    """A custom loop whose replica 1 holds its gradients 50 ms (mt.straggle), run by the test
    itself; then mt.diagnose(strategy) reads the steps already recorded. The three other replicas
    wait ~50 ms each: they are not held up by the straggler's sleep, which (inside tf.function)
    automatic control dependencies would chain before the stamps of the replicas traced after it."""
    s = timing(devices, 4)
    step = custom_step(s, 32, 64, after_grads=lambda g: mt.straggle(g, 0.05, replica=1))
    for _ in range(8):
        s.experimental_local_results(step())[0].numpy()
    d = mt.diagnose(s, steps=6)
    assert d.cause == "stragglers", d.report()
    assert d.waiting_s > 0.5 * 0.75 * 0.05, d.report()  # three of four wait ~50 ms (margin 2x)


def test_eager_steps_are_named_with_their_cost(devices):
    """The same step without tf.function: eager is the cause, and the tf.function run is faster."""
    s = timing(devices, 2)
    d = mt.diagnose(s, custom_step(s, 64, 64, compiled=False), steps=4)
    assert d.eager and d.cause == "eager", d.report()
    assert d.graph_step_s < d.step_s and d.eager_s > 0
    assert "tf.function" in d.report()


def test_the_eager_report_adds_up_on_one_clock(devices):
    """eager execution = the eager step's time - the tf.function step's, both means of the
    timeline's step spans, as the report prints them (they once mixed host-clock medians with
    the timeline's mean, so 47.27 - 2.58 printed as 46.60); every bracket of the report closes."""
    s = timing(devices, 2)
    d = mt.diagnose(s, custom_step(s, 64, 64, compiled=False), steps=4)
    graph = s.trace.timeline(s.trace.timed_steps()[-4:])  # the tf.function steps, run last
    assert d.eager and not any(graph.eager), d.report()
    assert d.graph_step_s == pytest.approx(float(np.mean(graph.step_seconds())), abs=1e-9)
    assert d.eager_s == pytest.approx(d.step_s - d.graph_step_s, abs=1e-9), d.report()
    text = d.report()
    assert (f"{d.eager_s * 1e3:.2f} ms" in text and f"= {d.step_s * 1e3:.2f} ms eagerly - "
            f"{d.graph_step_s * 1e3:.2f} ms in tf.function" in text), text
    for line in text.splitlines():
        assert line.count("(") == line.count(")"), line


def test_the_report_says_the_cause_and_the_remedy(devices):
    """The report has one line per cause with its milliseconds, and the remedy of the dominant one."""
    s = mt.MirroredStrategy(devices[:2], recording=mt.Recording.timing())
    slow = lambda ds: ds.batch(64, drop_remainder=True).map(read_slowly)  # noqa: E731
    d = mt.diagnose(s, custom_step(s, 64, 64, slow), steps=3, warmup=1)
    text = str(d)
    for words in ("input", "communication (all-reduce)", "stragglers (waiting)",
                  "eager execution", "Dominant cause: input", "num_parallel_calls"):
        assert words in text, text


def test_bad_arguments_get_plain_errors(devices):
    """Not a strategy, a step that is not a function, too few steps, no timeline: each says what
    to do."""
    with pytest.raises(mt.errors.DiagnosisError, match="mt.MirroredStrategy"):
        mt.diagnose(tf.distribute.OneDeviceStrategy("/cpu:0"))
    s = timing(devices, 2)
    with pytest.raises(mt.errors.DiagnosisError, match="function of no arguments"):
        mt.diagnose(s, step=3)
    with pytest.raises(mt.errors.DiagnosisError, match="steps must be a whole number >= 2"):
        mt.diagnose(s, steps=1)
    with pytest.raises(mt.errors.NotRecordedError, match="Only 0 of"):
        mt.diagnose(s)  # nothing ran yet
    with pytest.raises(mt.errors.NotRecordedError, match=r"Recording\(timeline=True\)"):
        mt.diagnose(mt.MirroredStrategy(devices[:2]))
