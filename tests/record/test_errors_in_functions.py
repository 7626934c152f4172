"""A mirrortutor error raised while tf.function traces a step reaches the student as itself.

AutoGraph re-raises an error from traced code with "in user code:" and a stack first, and turns a
class it cannot rebuild into a StagingError (tensorflow/python/autograph/impl/api.py,
``_ErrorMetadata.create_exception``). mirrortutor's errors carry ``ag_pass_through``, so the
student reads our type and our sentence first. Each program is also run under plain TF, to show
our error is of the kind TF raises there (drop-ins fail as TensorFlow does).
"""

from __future__ import annotations

import re

import keras
import pytest
import tensorflow as tf

import mirrortutor as mt
from helpers import digits, plain_mirrored
from mirrortutor.errors import BatchSplitError, OutsideScopeError

OUTSIDE = re.compile(r"Variable '[^']+' was not created inside this strategy's scope, so it is a "
                     r"single variable on \S+, not one copy per replica")


def train_outside_scope(strategy) -> None:
    """A custom tf.function loop whose model and optimizer were created OUTSIDE the scope."""
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    data = strategy.experimental_distribute_dataset(digits(64).to_tf(32, with_index=False))

    @tf.function
    def step(batch):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                                  global_batch_size=32)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    for batch in data:
        step(batch)


def reduce_uneven(strategy) -> None:
    """strategy.reduce(axis=None) of per-replica values of 2 and 1 elements, in a tf.function."""
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.range(3).batch(3))

    @tf.function
    def step(batch):
        per_replica = strategy.run(lambda x: tf.cast(x, tf.float32) * 2.0, args=(batch,))
        return strategy.reduce("SUM", per_replica, axis=None)

    for batch in data:
        step(batch)


def test_a_model_outside_the_scope_in_a_tf_function_loop_reads_our_sentence_first(devices):
    """The error is OutsideScopeError itself; its message starts with what happened and says
    what to do, with no "in user code:" stack before it."""
    with pytest.raises(OutsideScopeError) as caught:
        train_outside_scope(mt.MirroredStrategy(devices[:2]))
    message = str(caught.value)
    assert OUTSIDE.match(message), message[:300]
    assert "inside `with strategy.scope():`" in message and "in user code" not in message


def test_plain_tf_fails_that_program_with_an_assertion_error_as_ours_is(devices):
    """Plain MirroredStrategy fails the same program with a bare AssertionError (an ``assert`` in
    MirroredExtended._update): code that catches it catches ours too."""
    with pytest.raises(AssertionError, match="in user code") as caught:
        train_outside_scope(plain_mirrored(devices[:2]))
    assert type(caught.value) is AssertionError
    assert issubclass(OutsideScopeError, AssertionError)


def test_uneven_values_reduced_in_a_tf_function_raise_batch_split_error(devices):
    """strategy.reduce of values that cannot be added: BatchSplitError and its sentence first
    (plain TF: a ValueError from AddN's shapes, which BatchSplitError also is)."""
    with pytest.raises(BatchSplitError) as caught:
        reduce_uneven(mt.MirroredStrategy(devices[:2]))
    assert str(caught.value).startswith("The replicas' values have different shapes ((2,), (1,))")
    with pytest.raises(ValueError, match="Dimension 0 in both shapes must be equal"):
        reduce_uneven(plain_mirrored(devices[:2]))
    assert issubclass(BatchSplitError, ValueError)
