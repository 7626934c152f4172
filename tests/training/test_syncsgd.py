"""SyncSGD (the synchronous contrast of chapters 06-07).

SyncSGD runs under MirroredStrategy in this process (no cluster is connected here). Its update is
checked against a numpy reference of plain SGD on the full global batch; stragglers, a failing
replica and resuming from a checkpoint are checked against an uninterrupted run.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from mirrortutor.training.stragglers import Straggler
from mirrortutor.errors import InvalidQuantityError, WorkerIndexError
from mirrortutor.training.syncsgd import SyncSGD, SyncTrace

LR = 0.3


def model_fn():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(10)])


@pytest.fixture(scope="module")
def data():
    return mt.data.digits().take(384)


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_one_step_is_plain_sgd_on_the_global_batch(devices, data):
    """One synchronous step equals w - lr * (gradient of the mean loss over the global batch)."""
    sync = SyncSGD(mt.MirroredStrategy(devices[:2]), model_fn, learning_rate=LR)
    reference = model_fn()  # same seed: same starting weights, on one device
    x, y = next(iter(data.to_tf(with_index=False, shuffle=True, seed=0).batch(2 * 16)))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, reference(x))
    grads = tape.gradient(loss, reference.trainable_variables)
    expected = [w.numpy() - LR * g.numpy() for w, g in zip(reference.trainable_variables, grads)]
    trace = sync.fit(data, 1, batch_size=16)
    assert trace.steps[0].loss == pytest.approx(float(loss), rel=1e-5)
    for got, want in zip(sync.weights(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert int(sync.step.numpy()) == 1 and trace.staleness().tolist() == [0]


def test_straggler_changes_timing_not_weights(devices, data):
    """A straggler replica makes steps slower but the weights stay bit-identical."""
    plain = SyncSGD(mt.MirroredStrategy(devices[:3]), model_fn, learning_rate=LR)
    slow = SyncSGD(mt.MirroredStrategy(devices[:3]), model_fn, learning_rate=LR,
                   stragglers=[Straggler(2, delay=0.05)])
    fast_trace, slow_trace = plain.fit(data, 6, batch_size=16), slow.fit(data, 6, batch_size=16)
    assert _same(plain.weights(), slow.weights())
    # Every step waits for the 50 ms delay (a lower bound, not a timing measurement).
    assert min(s.step_seconds for s in slow_trace.steps) >= 0.05
    assert len(fast_trace.steps) == len(slow_trace.steps) == 6


def test_failed_step_applies_nothing_and_checkpoint_resumes_exactly(devices, data, tmp_path):
    """A replica failing mid-step changes no weight; restoring a checkpoint reproduces the run."""
    uninterrupted = SyncSGD(mt.MirroredStrategy(devices[:2]), model_fn, learning_rate=LR)
    uninterrupted.fit(data, 12, batch_size=16)
    run = SyncSGD(mt.MirroredStrategy(devices[:2]), model_fn, learning_rate=LR)
    checkpoint = tf.train.Checkpoint(model=run.model, step=run.step)
    run.fit(data, 5, batch_size=16)
    saved = checkpoint.save(str(tmp_path / "ckpt"))
    run.fit(data, 3, batch_size=16)
    before = run.weights()
    with pytest.raises(tf.errors.InvalidArgumentError, match="a replica failed"):
        run.fit(data, 4, batch_size=16, fail_at=8)
    assert int(run.step.numpy()) == 8 and _same(before, run.weights())
    checkpoint.restore(saved)
    assert int(run.step.numpy()) == 5
    run.fit(data, 7, batch_size=16)
    assert _same(uninterrupted.weights(), run.weights())


def test_a_synchronous_fit_shows_progress_to_its_end(devices, data):
    """SyncSGD.fit shows a bar over its updates, and it reaches the last one."""
    from mirrortutor.progress import FINISHED

    SyncSGD(mt.MirroredStrategy(devices[:2]), model_fn).fit(data, 5)
    assert FINISHED[-1].description == "synchronous updates"
    assert FINISHED[-1].done == FINISHED[-1].total == 5


def test_bad_arguments_are_refused(devices, data):
    """A straggler on a missing replica, factor < 1, lr <= 0 or steps < 1 raise clear errors."""
    strategy = mt.MirroredStrategy(devices[:2])
    with pytest.raises(WorkerIndexError, match="replicas 0 to 1"):
        SyncSGD(strategy, model_fn, stragglers={2: 3.0})
    with pytest.raises(InvalidQuantityError, match="factor >= 1"):
        SyncSGD(strategy, model_fn, stragglers=[Straggler(0, factor=0.5)])
    with pytest.raises(InvalidQuantityError, match="learning_rate"):
        SyncSGD(strategy, model_fn, learning_rate=0)
    sync = SyncSGD(strategy, model_fn)
    with pytest.raises(InvalidQuantityError, match="steps"):
        sync.fit(data, 0)
    for bad in (0, 1.5, "2"):
        with pytest.raises(InvalidQuantityError, match="accumulate must be a whole number"):
            SyncSGD(strategy, model_fn, accumulate=bad)


# ---- gradient accumulation ---------------------------------------------------------------------
def test_k_accumulated_micro_batches_make_the_update_of_one_k_times_larger_batch(devices, data):
    """accumulate=4 with 8 examples per replica gives the weights and losses of batch_size=32 with
    no accumulation, to float tolerance (the sums are added in another order), over 3 updates."""
    big = SyncSGD(mt.MirroredStrategy(devices[:2]), model_fn, learning_rate=LR)
    accumulated = SyncSGD(mt.MirroredStrategy(devices[:2]), model_fn, learning_rate=LR,
                          accumulate=4)
    big_trace = big.fit(data, 3, batch_size=32)
    acc_trace = accumulated.fit(data, 3, batch_size=8)
    for got, want in zip(accumulated.weights(), big.weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(acc_trace.column("loss"), big_trace.column("loss"), rtol=1e-5)
    assert [s.examples for s in acc_trace.steps] == [64] * 3
    assert int(accumulated.step.numpy()) == 3
    moved = max(float(np.max(np.abs(a - b))) for a, b in
                zip(accumulated.weights(), [w.numpy() for w in model_fn().trainable_variables]))
    assert moved > 1e-3  # the updates did change the weights: the comparison is not vacuous


def test_accumulation_all_reduces_once_per_update_not_per_micro_batch(devices, data):
    """4 micro-batches per update: the gradients' all-reduces happen only in the update's run."""
    strategy = mt.MirroredStrategy(devices[:2], recording=mt.Recording.everything())
    SyncSGD(strategy, model_fn, learning_rate=LR, accumulate=4).fit(data, 2, batch_size=8)
    runs = strategy.trace.steps_run
    reducing = [s for s in range(runs) if strategy.trace.allreduces(s)]
    assert runs == 2 * (4 + 1) and reducing == [4, 9], reducing


# ---- what chapters 06-07's figures were drawn from (they now draw the recording PS's log) -----
def test_a_sync_trace_counts_the_examples_seen_before_each_update(devices, data):
    sync = SyncSGD(mt.MirroredStrategy(devices[:2]), model_fn, learning_rate=LR)
    sync_trace = sync.fit(data, 4, batch_size=16)
    assert isinstance(sync_trace, SyncTrace)
    assert sync_trace.examples_seen().tolist() == [0, 32, 64, 96]  # global batch 2 × 16
