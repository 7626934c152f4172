"""A custom training loop under tf.distribute.MirroredStrategy: plain TensorFlow, nothing else.

Run it as it is, on your GPUs (or on one CPU):

    python programs/custom_loop.py

or watch what tf.distribute does in it, on a laptop's logical CPUs:

    python -m mirrortutor record --replicas 4 programs/custom_loop.py

The loop is chapter 03's: each replica computes the loss of its shard divided by the GLOBAL batch
size, the optimizer all-reduces (sums) the replicas' gradients, and strategy.reduce adds up the
replicas' losses into the loss of the whole batch.
"""

import sys

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH_SIZE = 16
EPOCHS = 2

keras.utils.set_random_seed(0)
strategy = tf.distribute.MirroredStrategy()

# A small regression problem, made here (no download): y is the sum of x's five features.
x = np.random.default_rng(0).normal(size=(64, 5)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH_SIZE)
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(learning_rate=0.05)


def train_step(x_batch, y_batch):
    with tf.GradientTape() as tape:
        per_example_loss = tf.square(model(x_batch, training=True) - y_batch)[:, 0]
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))  # all-reduces them
    return loss


@tf.function
def distributed_train_step(batch):
    per_replica_losses = strategy.run(train_step, args=batch)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


print("replicas:", strategy.num_replicas_in_sync, "arguments:", sys.argv[1:])
for epoch in range(EPOCHS):
    for step, batch in enumerate(dist_dataset):
        loss = distributed_train_step(batch)
        print(f"epoch {epoch} step {step} loss {float(loss)!r}")
        if "--fail" in sys.argv and epoch == 1:
            raise ValueError("this program was asked to fail (--fail)")
