"""Chapter 10's job: one small network trained on digits with a custom loop, under the strategy
named on the command line. Plain TensorFlow: the same file runs on one device, on the GPUs of one
machine (MirroredStrategy) and on every worker of a cluster (MultiWorkerMirroredStrategy, each
worker with its own TF_CONFIG).

    python programs/10_train.py --strategy mirrored --global-batch 96 --rate 0.9 --seed 0 \\
        --data digits.npz
    python -m mirrortutor record --replicas 3 programs/10_train.py --strategy mirrored ...

--data is an .npz with x_train, y_train, x_test, y_test (chapter 10 writes it from the digits);
without it the program makes a small random problem of the same shapes (no download).

The job is fixed by its arguments: the starting weights (seed 1 in every run), the data order
(--seed shuffles the training examples once), --epochs passes over them in global batches of
--global-batch examples, SGD at --rate. Each replica's loss is divided by the GLOBAL batch
(tf.nn.compute_average_loss), and Keras's optimizer sums the replicas' gradients with an
all-reduce (TFOptimizer._all_reduce_sum_gradients, keras/src/backend/tensorflow/optimizer.py), so
the update follows the gradient of the whole batch's mean loss, whatever the number of replicas.
It prints the first and last training loss and the held-out loss and accuracy (fixed formats: no
timings on stdout); the time of every step is in `step_seconds`, and --out DIR writes each
worker's weights (DIR/weights-<task>.npz) and its losses, step times and held-out scores
(DIR/run-<task>.json).
"""

import argparse
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--strategy", choices=["one", "mirrored", "multiworker"], default="one")
parser.add_argument("--replicas", type=int, default=0, help="mirrored: how many devices (0: all)")
parser.add_argument("--global-batch", type=int, default=32)
parser.add_argument("--rate", type=float, default=0.3)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--data", default="")
parser.add_argument("--out", default="")
args = parser.parse_args()

keras.utils.set_random_seed(1)  # TF's global seed too: with --seed it fixes the shuffle below
if args.strategy == "mirrored":
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    strategy = tf.distribute.MirroredStrategy(devices[:args.replicas or len(devices)])
elif args.strategy == "multiworker":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG
else:
    strategy = tf.distribute.get_strategy()  # the default strategy: one device, one replica

if args.data:
    with np.load(args.data) as d:
        x_train, y_train, x_test, y_test = (d[k] for k in ("x_train", "y_train", "x_test", "y_test"))
else:
    rng = np.random.default_rng(0)
    x_train, x_test = (rng.normal(size=(n, 64)).astype("float32") for n in (192, 64))
    y_train, y_test = (rng.integers(0, 10, size=n) for n in (192, 64))

dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train.astype("int64")))
           .shuffle(len(x_train), seed=args.seed, reshuffle_each_iteration=False)
           .repeat(args.epochs)
           .batch(args.global_batch, drop_remainder=True))
# DATA: every worker reads the whole dataset and keeps its share of each global batch, so the
# workers together read the batches one device reads. It needs a fixed order (the seeded shuffle
# above); the default, AUTO, tries FILE first (AutoShardPolicy in tensorflow/python/data/ops/
# options.py).
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dist_dataset = strategy.experimental_distribute_dataset(dataset.with_options(options))

with strategy.scope():
    keras.utils.set_random_seed(1)  # the same starting weights in every run
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(learning_rate=args.rate)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def replica_step(batch):
    x, y = batch
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                          global_batch_size=args.global_batch)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))  # sums them over replicas
    return loss


@tf.function
def train_step(batch):
    per_replica = strategy.run(replica_step, args=(batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


losses, step_seconds = [], []
for batch in dist_dataset:
    start = time.perf_counter()
    losses.append(float(train_step(batch)))  # float() waits for the step to finish
    step_seconds.append(time.perf_counter() - start)

logits = model(x_test, training=False)
test_loss = float(tf.reduce_mean(loss_fn(y_test, logits)))
test_accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test))
print(f"{args.strategy}, {strategy.num_replicas_in_sync} replica(s), seed {args.seed}: "
      f"{len(losses)} updates of {args.global_batch} at rate {args.rate}; training loss "
      f"{losses[0]:.4f} -> {losses[-1]:.4f}; held-out loss {test_loss:.4f}, "
      f"accuracy {test_accuracy:.3f}")

if args.out:  # a folder: each worker's weights, and its losses and step times (for the notebook)
    task = strategy.cluster_resolver.task_id if args.strategy == "multiworker" else 0
    os.makedirs(args.out, exist_ok=True)
    np.savez(os.path.join(args.out, f"weights-{task}.npz"), *model.get_weights())
    with open(os.path.join(args.out, f"run-{task}.json"), "w") as f:
        json.dump({"losses": losses, "step_seconds": step_seconds, "test_loss": test_loss,
                   "test_accuracy": test_accuracy}, f)
