"""Parameter-server training written as TensorFlow's tutorial writes it: plain TensorFlow.

``python ps_tutorial.py OUT.json [STEPS]`` with ``TF_CONFIG`` naming a cluster whose "chief" is
this process. It trains a small Keras model with SGD by scheduling ``STEPS`` steps on whichever
worker is free, then writes each step's loss and where TensorFlow placed each variable to
OUT.json. test_parameter_server.py runs it under stock TensorFlow and under ``record``.
"""

import json
import sys

import keras
import tensorflow as tf

out = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def dataset_fn(input_context):
    x = tf.random.stateless_normal((512, 8), seed=(1, 2))
    y = tf.cast(x[:, 0] + x[:, 1] > 0, tf.int64)
    batch = input_context.get_per_replica_batch_size(32)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=3).repeat().batch(batch)


@tf.function
def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(dataset_fn)


per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))


@tf.function
def step_fn(iterator):
    def replica_fn(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    losses = strategy.run(replica_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


results = [coordinator.schedule(step_fn, args=(per_worker_iterator,)) for _ in range(steps)]
coordinator.join()
variables = [getattr(v, "value", v) for v in model.variables + optimizer.variables]
with open(out, "w") as f:
    json.dump({"losses": [float(r.fetch()) for r in results],
               "placement": [[v.name.split(":")[0], v.device] for v in variables]}, f)
print(f"{steps} steps scheduled and joined")
