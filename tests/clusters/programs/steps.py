"""A small multi-worker program for the cluster tests: plain TF, as long as asked, no data file.

Every worker runs it with its own TF_CONFIG (``cluster.run_program(path, "--steps", "6")``; a
long ``--steps`` keeps the workers busy while a test looks at them). Each step all-reduces a
gradient over every worker (``MultiWorkerMirroredStrategy``) and prints one line, so a test can
follow the run from the worker's stdout file. ``--fail``: worker 1 raises before training.
"""

import argparse

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--fail", action="store_true", help="worker 1 raises on purpose")
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(256, 3)).astype("float32")
data = {"index": np.arange(256), "x": x, "y": x.sum(1, keepdims=True)}
batches = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices(data).batch(8).repeat())
with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)


def step_fn(batch):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(model(batch["x"]) - batch["y"])[:, 0],
                                          global_batch_size=8)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))
    return loss


@tf.function
def train_step(iterator):
    return strategy.reduce("SUM", strategy.run(step_fn, args=(next(iterator),)), axis=None)


if args.fail and strategy.cluster_resolver.task_id == 1:
    raise ValueError("worker 1 was told to fail")
iterator = iter(batches)
for step in range(args.steps):
    print(step, repr(float(train_step(iterator))), flush=True)
