"""Chapter 05's training: Keras fit under tf.distribute.MirroredStrategy on N replicas, with the
linear scaling rule and a warm-up. Plain TensorFlow, nothing else.

Run it as it is, on a machine's GPUs (or on its CPU):

    python programs/05_scaling.py --replicas 8 --lr-rule warmup

or watch what tf.distribute does in it, on a laptop's logical CPUs:

    python -m mirrortutor record --replicas 8 programs/05_scaling.py --replicas 8

One replica count per process. TensorFlow's collectives find each other by a group key that is
process-wide, so a second MirroredStrategy over a different number of devices in the same process
fails (InternalError: "... is joining a group with size8, but that group has size 4 (group_key=1)",
for 4 replicas, then 8). Run each count as a process of its own, as above.

--data PATH.npz reads x_train, y_train, x_test, y_test (the course's notebook writes the digits
there); without it the program makes up a 10-class problem, so that it runs anywhere.
"""

import argparse
import sys
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description="Keras fit under MirroredStrategy, scaled.")
parser.add_argument("--replicas", type=int, default=0, help="devices to use (0: all)")
parser.add_argument("--per-replica-batch", type=int, default=16)
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--base-lr", type=float, default=0.05, help="SGD rate for ONE replica's batch")
parser.add_argument("--lr-rule", choices=["fixed", "linear", "warmup"], default="linear")
parser.add_argument("--warmup-epochs", type=int, default=1)
parser.add_argument("--width", type=int, default=64, help="units in the hidden layer")
parser.add_argument("--data", default="", help=".npz with x_train, y_train, x_test, y_test")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
keras.utils.set_random_seed(args.seed)  # the same weights and batch order on every run

# ---- the devices: all GPUs if there are any, else the CPUs ------------------------------------
devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
if not 0 <= args.replicas <= len(devices):
    sys.exit(f"--replicas {args.replicas}: this machine has {len(devices)} device(s)")
strategy = tf.distribute.MirroredStrategy(devices[: args.replicas or len(devices)])

# ---- the data -----------------------------------------------------------------------------------
if args.data:
    with np.load(args.data) as arrays:
        x_train, y_train, x_test, y_test = (arrays[k] for k in ("x_train", "y_train",
                                                                 "x_test", "y_test"))
else:  # ten noisy clusters in 64 dimensions
    rng = np.random.default_rng(args.seed)
    labels = rng.integers(0, 10, 1000)
    features = rng.normal(size=(10, 64))[labels] + rng.normal(size=(1000, 64))
    x_train, x_test = features[:800].astype("float32"), features[800:].astype("float32")
    y_train, y_test = labels[:800], labels[800:]

# The global batch grows with the replicas: each replica keeps its per-replica batch.
global_batch_size = args.per_replica_batch * strategy.num_replicas_in_sync
steps_per_epoch = len(x_train) // global_batch_size
if steps_per_epoch < 1:
    sys.exit(f"a global batch of {global_batch_size} is larger than the {len(x_train)} training "
             "examples: use fewer replicas or a smaller per-replica batch")
dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
           .shuffle(len(x_train), seed=args.seed)           # a new order every epoch
           # Only full batches: every step splits one global batch evenly over the replicas, and
           # the repeated stream keeps in step with steps_per_epoch. (fit itself needs only its
           # first batch to split evenly: chapter 02, section 3 of the course.)
           .batch(global_batch_size, drop_remainder=True)
           .repeat()                                        # one iterator for every epoch
           .prefetch(tf.data.AUTOTUNE))                     # the next batch while this one trains


# ---- the learning rate: the linear scaling rule, and a warm-up ----------------------------------
class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """From `start` at step 0 up by the same amount every step to `peak` at `warmup_steps`, then
    `peak` (Goyal et al. 2017, "Accurate, Large Minibatch SGD", section 2.2, gradual warm-up)."""

    def __init__(self, start, peak, warmup_steps):
        self.start, self.peak, self.warmup_steps = start, peak, warmup_steps

    def __call__(self, step):
        # step: optimizer.iterations. In fit this Python runs while the train step is traced,
        # not at every update; the ops it returns do, so decide on step with tf ops.
        if self.warmup_steps == 0:  # no warm-up: the peak from the first step
            return tf.constant(self.peak, tf.float32)
        done = tf.minimum(tf.cast(step, tf.float32) / self.warmup_steps, 1.0)
        return self.start + (self.peak - self.start) * done

    def get_config(self):
        return {"start": self.start, "peak": self.peak, "warmup_steps": self.warmup_steps}


peak_lr = args.base_lr * strategy.num_replicas_in_sync  # k times the batch: k times the rate
if args.lr_rule == "fixed":
    learning_rate = args.base_lr
elif args.lr_rule == "linear":
    learning_rate = peak_lr
else:
    learning_rate = LinearWarmup(args.base_lr, peak_lr, args.warmup_epochs * steps_per_epoch)

# ---- the model: built and compiled in the strategy's scope --------------------------------------
with strategy.scope():
    model = keras.Sequential([
        keras.Input((x_train.shape[1],)),
        keras.layers.Dense(args.width, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])


class Watch(keras.callbacks.Callback):
    """Per epoch: accuracy on the test examples; per step: when it began (for its time)."""

    def on_epoch_begin(self, epoch, logs=None):
        step_starts.append([])

    def on_train_batch_begin(self, batch, logs=None):
        step_starts[-1].append(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):
        logits = model(x_test, training=False)
        test_accuracy.append(float(np.mean(np.argmax(logits, axis=1) == y_test)))


step_starts, test_accuracy = [], []
history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=steps_per_epoch, verbose=0,
                    shuffle=False, callbacks=[Watch()])  # shuffle: the dataset does it
# A step's time: from one step's start to the next, after the first epoch (which traces).
step_seconds = [b - a for epoch in step_starts[1:] or step_starts for a, b in zip(epoch, epoch[1:])]

print(f"{strategy.num_replicas_in_sync} replica(s), global batch {global_batch_size}, "
      f"{steps_per_epoch} steps per epoch, learning rate ({args.lr_rule}) at the end "
      f"{float(model.optimizer.learning_rate.numpy()):.4g}")
print("loss by epoch:", [round(loss, 4) for loss in history.history["loss"]])
print("test accuracy by epoch:", [round(acc, 4) for acc in test_accuracy])
