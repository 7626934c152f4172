"""Gradients are named by the variables they update, from TensorFlow's own pairing (issue 22).

A reduced value becomes "the gradient of v" only when the program applies it to ``v`` through
``extended.update`` (every optimizer step does), so frozen layers, two optimizers, clipping,
regularisation and ``strategy.reduce`` of gradients all name correctly, and two variables of the
same shape can never swap names. Every program also runs under plain ``tf.distribute``: the losses
and weights must be equal bit for bit (a recording tap once changed a reduced loss's last bit by
keeping grappler from folding a sum; see ``record/gate.py``).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from helpers import plain_mirrored

pytestmark = pytest.mark.filterwarnings("error::UserWarning:mirrortutor.*")
GLOBAL_BATCH = 16
REPLICAS = 2


def twins():
    """Two layers whose kernels have the same shape: names by shape would be a coin toss."""
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="first"),
                             keras.layers.Dense(4, name="second", kernel_regularizer="l2")])


def gan(strategy, loop: str):
    """A GAN-style step: two models, two optimizers (one clipping), a frozen layer, a
    regularisation loss, and the losses reduced with strategy.reduce("SUM", ..., axis=None)."""
    keras.utils.set_random_seed(1)
    with strategy.scope():
        gen = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="g1",
                                kernel_regularizer="l2"), keras.layers.Dense(4, name="g2")])
        disc = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="frozen"),
                                 keras.layers.Dense(1, name="d2")])
        disc.get_layer("frozen").trainable = False
        g_opt, d_opt = keras.optimizers.Adam(1e-2, clipnorm=0.5), keras.optimizers.SGD(0.1)
        g_opt.build(gen.trainable_variables)
        d_opt.build(disc.trainable_variables)
    bce = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
    real = np.random.default_rng(0).normal(size=(4 * GLOBAL_BATCH, 4)).astype("float32")
    data = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(real).batch(GLOBAL_BATCH))

    def step(x):
        r_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        z = tf.random.stateless_normal((tf.shape(x)[0], 3), seed=[7, r_id])
        with tf.GradientTape() as gt, tf.GradientTape() as dt:
            fake = gen(z, training=True)
            real_out, fake_out = disc(x, training=True), disc(fake, training=True)
            d_loss = tf.nn.compute_average_loss(
                bce(tf.ones_like(real_out), real_out) + bce(tf.zeros_like(fake_out), fake_out),
                global_batch_size=GLOBAL_BATCH)
            g_loss = tf.nn.compute_average_loss(bce(tf.ones_like(fake_out), fake_out),
                                                global_batch_size=GLOBAL_BATCH) \
                + tf.nn.scale_regularization_loss(tf.add_n(gen.losses))
        g_opt.apply_gradients(zip(gt.gradient(g_loss, gen.trainable_variables),
                                  gen.trainable_variables))
        d_opt.apply_gradients(zip(dt.gradient(d_loss, disc.trainable_variables),
                                  disc.trainable_variables))
        return d_loss, g_loss

    def train(x):
        d, g = strategy.run(step, args=(x,))
        return strategy.reduce("SUM", d, axis=None), strategy.reduce("SUM", g, axis=None)

    train = tf.function(train) if loop == "function" else train
    losses = [[float(v) for v in train(x)] for x in data]
    weights = [w.numpy() for w in gen.weights + disc.weights]
    return losses, weights, {v.path for v in gen.trainable_variables + disc.trainable_variables}


def reduce_then_apply(strategy, loop: str):
    """The custom loop that reduces the gradients itself (strategy.reduce of a list, after run)
    and applies them in cross-replica context: the optimizer's update names them."""
    keras.utils.set_random_seed(2)
    with strategy.scope():
        model = twins()
        opt = keras.optimizers.SGD(0.05)
        opt.build(model.trainable_variables)
    x = np.random.default_rng(1).normal(size=(3 * GLOBAL_BATCH, 4)).astype("float32")
    data = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, x[:, ::-1])).batch(GLOBAL_BATCH))

    def grads(batch):
        xb, yb = batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.reduce_sum((model(xb) - yb) ** 2, axis=1),
                                              global_batch_size=GLOBAL_BATCH) \
                + tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        return tape.gradient(loss, model.trainable_variables), loss

    def train(batch):
        local, loss = strategy.run(grads, args=(batch,))
        summed = strategy.reduce("SUM", local, axis=None)
        opt.apply_gradients(zip(summed, model.trainable_variables))
        return strategy.reduce("SUM", loss, axis=None)

    train = tf.function(train) if loop == "function" else train
    losses = [float(train(b)) for b in data]
    return losses, [w.numpy() for w in model.weights], {v.path for v in model.trainable_variables}


def fit(strategy, loop: str):
    """Keras fit: its optimizer all-reduces in replica context, then updates each variable."""
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = twins()
        model.compile(keras.optimizers.Adam(1e-2, clipnorm=1.0), "mse",
                      run_eagerly=loop == "eager")
    x = np.random.default_rng(2).normal(size=(3 * GLOBAL_BATCH, 4)).astype("float32")
    history = model.fit(x, x[:, ::-1], batch_size=GLOBAL_BATCH, epochs=1, verbose=0,
                        shuffle=False)
    return history.history["loss"], [w.numpy() for w in model.weights], \
        {v.path for v in model.trainable_variables}


@pytest.mark.parametrize("loop", ["eager", "function"])
@pytest.mark.parametrize("program", [gan, reduce_then_apply, fit], ids=lambda p: p.__name__)
def test_gradients_are_named_by_the_variables_they_update(devices, program, loop):
    """Same losses and weights as plain TF, bit for bit; every recorded step has a gradient for
    every trainable variable on every replica, named by the variable, and only for those."""
    plain = program(plain_mirrored(devices[:REPLICAS]), loop)
    strategy = mt.MirroredStrategy(devices[:REPLICAS], recording=mt.Recording.everything())
    recorded = program(strategy, loop)
    assert plain[0] == recorded[0]  # the losses, floats compared exactly
    assert all(np.array_equal(a, b) for a, b in zip(plain[1], recorded[1]))
    trace, trainable = strategy.trace, recorded[2]
    assert trace.steps
    for step in trace.steps:
        grads = trace.gradients(step)
        assert {g.variable for g in grads} == trainable, step
        assert sorted((g.variable, g.replica_id) for g in grads) == sorted(
            (v, r) for v in trainable for r in range(REPLICAS))


def test_a_gradient_is_the_one_the_tape_computed_for_that_variable(devices):
    """The recorded local gradient of each variable is what GradientTape gave that variable on
    that replica: twins of the same shape keep their own values (no shape matching)."""
    strategy = mt.MirroredStrategy(devices[:REPLICAS], recording=mt.Recording.everything())
    with strategy.scope():
        model = twins()
        opt = keras.optimizers.SGD(0.1)
        opt.build(model.trainable_variables)
    x = np.random.default_rng(3).normal(size=(GLOBAL_BATCH, 4)).astype("float32")
    batch = next(iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, 2 * x)).batch(GLOBAL_BATCH))))

    @tf.function
    def train(batch):
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(tf.reduce_sum((model(xb) - yb) ** 2, axis=1),
                                                  global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return {v.path: g for v, g in zip(model.trainable_variables, grads)}
        return strategy.run(step, args=batch)

    tape_grads = train(batch)
    for g in strategy.trace.gradients(0):
        local = strategy.experimental_local_results(tape_grads[g.variable])[g.replica_id]
        assert np.array_equal(g.value, local.numpy()), (g.variable, g.replica_id)


def test_an_assigned_value_is_not_a_gradient(devices):
    """A MEAN write to a variable is reduced *into* it (its destination): recorded as a
    reduction, never listed as that variable's gradient."""
    strategy = mt.MirroredStrategy(devices[:REPLICAS], recording=mt.Recording.everything())
    with strategy.scope():
        v = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)
    strategy.run(lambda: v.assign(tf.cast(
        tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)))
    assert strategy.trace.allreduces(0) and strategy.trace.gradients(0) == []
    assert float(v.numpy()) == 0.5
