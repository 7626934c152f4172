"""Small training programs the tests run under plain TF and under mirrortutor, to compare."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

import mirrortutor as mt
from mirrortutor.record.tf_internals.hooks import plain_mirrored_strategy

GLOBAL_BATCH = 64


def plain_mirrored(devices) -> tf.distribute.MirroredStrategy:
    """TF's own MirroredStrategy, with fresh collective keys so several can share the process.

    (TF's own tests do the same: without it, a second strategy over a different number of
    devices aborts every collective that follows.)
    """
    return plain_mirrored_strategy(devices)


def make_model(seed: int = 1) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(10),
    ])


def digits(n: int = 256):
    return mt.data.digits().take(n)


def train_custom(strategy, data, epochs: int = 2, seed: int = 1, lr: float = 0.1):
    """A textbook custom loop; returns (weights, per-step global losses)."""
    with strategy.scope():
        model = make_model(seed)
        optimizer = keras.optimizers.SGD(lr)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    dist = strategy.experimental_distribute_dataset(data.to_tf(GLOBAL_BATCH))

    @tf.function
    def step(batch):
        def replica_step(index, x, y):
            with tf.GradientTape() as tape:
                per_example = loss_fn(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    losses = [float(step(b)) for _ in range(epochs) for b in dist]
    return [w.numpy() for w in model.weights], losses


def train_fit(strategy, data, epochs: int = 2, seed: int = 1, lr: float = 0.1):
    """Keras fit in the strategy's scope; returns (weights, history)."""
    with strategy.scope():
        model = make_model(seed)
        model.compile(optimizer=keras.optimizers.SGD(lr),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(data.to_tf(GLOBAL_BATCH, with_index=False), epochs=epochs, verbose=0, shuffle=False)
    return [w.numpy() for w in model.weights], history.history


def same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


def mlp_step(strategy, width: int, global_batch: int, dataset, *, layers: int = 2,
             lr: float = 0.01, compiled: bool = True, after_grads=None, reduce: bool = False):
    """One custom training step of a ReLU MLP (``layers`` hidden layers of ``width``) that reads
    its batch from ``dataset`` (repeated, distributed) inside the step. ``after_grads(grads)``
    may hold the gradients back (a straggler); ``reduce``: return the summed loss, else each
    replica's. Compiled with tf.function unless ``compiled=False`` (eager)."""
    with strategy.scope():
        keras.utils.set_random_seed(0)
        hidden = [keras.layers.Dense(width, activation="relu") for _ in range(layers)]
        model = keras.Sequential([keras.Input((64,)), *hidden, keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(lr)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    iterator = iter(strategy.experimental_distribute_dataset(dataset.repeat()))

    def step():
        def replica(index, x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                                  global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            grads = after_grads(grads) if after_grads is not None else grads
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        losses = strategy.run(replica, args=next(iterator))
        return strategy.reduce("SUM", losses, axis=None) if reduce else losses

    return tf.function(step) if compiled else step
