"""One worker of a multi-worker job: plain TensorFlow, the same file on every machine.

Each machine runs this same script with its own TF_CONFIG environment variable (the cluster's
addresses, and which worker this one is); worker 0 is the chief when the cluster lists no
"chief" task (TF's multi_worker_util.is_chief). On real machines:

    TF_CONFIG='{"cluster": {"worker": ["host-a:12345", "host-b:12345"]},
                "task": {"type": "worker", "index": 0}}' \
        python programs/08_worker.py --data train.npz --checkpoint-dir /shared/ckpt

Without TF_CONFIG it trains on one machine with tf.distribute.MirroredStrategy (all its GPUs), the
reference a multi-worker run must match. To watch what tf.distribute does in it, run it under
`python -m mirrortutor record` on every worker, or from a notebook with mirrortutor's launcher:
`mt.MultiWorkerCluster(workers=2).run_program("programs/08_worker.py", ...)`.

The data: --data FILE.npz (arrays x, y, held in memory) or --files PATTERN (TFRecord files, one
serialized float32 row [index, label, x...] per record). Each example keeps its number in a field
named "index", so a recording can say which examples each replica received.
"""

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data", help="an .npz file with arrays x (float32) and y (int)")
parser.add_argument("--files", help="a glob pattern of TFRecord files (instead of --data)")
parser.add_argument("--steps", type=int, default=16, help="training steps in all")
parser.add_argument("--global-batch", type=int, default=64, help="examples per step, all workers")
parser.add_argument("--learning-rate", type=float, default=0.1)
parser.add_argument("--shard-policy", default="DATA", choices=["AUTO", "DATA", "FILE", "OFF"])
parser.add_argument("--communication", default="RING", choices=["AUTO", "RING", "NCCL"])
parser.add_argument("--checkpoint-dir", help="where the chief keeps checkpoints (shared storage)")
parser.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints")
parser.add_argument("--loop", default="custom", choices=["custom", "fit"])
parser.add_argument("--out", help="a folder for each worker's final weights (weights-<task>.npz)")
parser.add_argument("--full-traceback", action="store_true",
                    help="show Keras's internal frames in an error (Keras hides them by default)")
args = parser.parse_args()

# ---- the cluster: who am I, and how do we all-reduce ------------------------------------------
if "TF_CONFIG" in os.environ:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()  # reads TF_CONFIG
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=getattr(tf.distribute.experimental.CommunicationImplementation,
                               args.communication))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                         communication_options=options)
    task = f"{resolver.task_type}{resolver.task_id}"
else:  # one machine: the reference
    strategy = tf.distribute.MirroredStrategy()
    task = "chief"
is_chief = strategy.extended.should_checkpoint  # worker 0 if no "chief" task (or the only machine)

# ---- the data: the same global batches on every worker; the strategy splits them -------------
if args.files:
    rows = tf.data.Dataset.list_files(args.files, shuffle=False).flat_map(
        tf.data.TFRecordDataset).map(lambda r: tf.io.parse_tensor(r, tf.float32))
    width = int(next(iter(rows)).shape[0])  # a row's length, which parse_tensor cannot know
    rows = rows.map(lambda v: tf.ensure_shape(v, [width]))
    examples = rows.map(lambda v: {"index": tf.cast(v[0], tf.int64), "x": v[2:],
                                   "y": tf.cast(v[1], tf.int64)})
else:
    with np.load(args.data) as data:
        x, y = data["x"].astype("float32"), data["y"].astype("int64")
    examples = tf.data.Dataset.from_tensor_slices({"index": np.arange(len(x)), "x": x, "y": y})
features = examples.element_spec["x"].shape[0]
dataset = examples.batch(args.global_batch, drop_remainder=True).repeat()
data_options = tf.data.Options()
data_options.experimental_distribute.auto_shard_policy = getattr(
    tf.data.experimental.AutoShardPolicy, args.shard_policy)
dataset = dataset.with_options(data_options)

# ---- the model: created in strategy.scope(), where every worker's copy of a variable starts from
# the chief's initial value, which the chief broadcasts (collective_all_reduce_strategy.py,
# CollectiveAllReduceExtended._get_variable_creator_initial_value); the fixed seed makes the run
# repeatable and the same as the one-machine reference ------------------------------------------
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(learning_rate=args.learning_rate)
    optimizer.build(model.trainable_variables)

if args.loop == "fit":  # Keras's own loop (fails under MultiWorkerMirroredStrategy with 2+ workers)
    if args.full_traceback:
        keras.config.disable_traceback_filtering()
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    model.fit(dataset.map(lambda b: (b["x"], b["y"])), epochs=1, steps_per_epoch=args.steps,
              verbose=0)
    raise SystemExit(0)

# ---- checkpoints: every worker saves (a variable synchronized ON_READ, unless its aggregation is
# ONLY_FIRST_REPLICA, is reduced across workers as it is saved); only the chief's files are kept -
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
start = 0
if args.checkpoint_dir:
    latest = tf.train.latest_checkpoint(args.checkpoint_dir)
    if latest:  # a restarted job: every worker restores the chief's latest checkpoint
        checkpoint.restore(latest).assert_existing_objects_matched()
        start = int(optimizer.iterations.numpy())
        print(f"{task}: resumed from {os.path.basename(latest)} at step {start}")
    write_dir = (args.checkpoint_dir if is_chief
                 else os.path.join(args.checkpoint_dir, f"scratch_{task}"))
    manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=None)
# skip whole global batches, before the strategy splits them between workers and replicas
iterator = iter(strategy.experimental_distribute_dataset(dataset.skip(start)))


@tf.function
def train_step(iterator):
    def step_fn(batch):
        with tf.GradientTape() as tape:
            logits = model(batch["x"], training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(
                batch["y"], logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))  # all-reduced
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


for step in range(start, args.steps):
    loss = train_step(iterator)
    print(f"{task} step {step} loss {float(loss)!r}")
    if args.checkpoint_dir and args.checkpoint_every and (step + 1) % args.checkpoint_every == 0:
        manager.save(checkpoint_number=step + 1)  # every worker calls save
        if not is_chief:
            tf.io.gfile.rmtree(write_dir)  # the scratch copy is not kept

if args.out:
    os.makedirs(args.out, exist_ok=True)
    np.savez(os.path.join(args.out, f"weights-{task}.npz"), *model.get_weights())
