"""keras-tuner searching hyperparameters with ``distribution_strategy=MirroredStrategy()``.

Third-party code: keras-tuner's ``Tuner`` (keras_tuner/src/engine/tuner.py,
``_build_and_fit_model`` and ``maybe_distribute``) builds each trial's model inside the
strategy's scope and calls Keras's ``model.fit``: the strategy use, the training loop and the
fit call are theirs. This driver does what keras-tuner's documentation asks of a user: a
``build_model(hp)`` hypermodel, a tuner with a ``distribution_strategy``, ``tuner.search``. Data
is made here (numpy, seeded). It prints every trial's hyperparameters and per-epoch losses as
exact floats, and a digest of the best model's weights, for a byte-for-byte comparison.

    python kerastuner_search.py WORKDIR          (plain TensorFlow, 2 logical CPUs)
    python -m mirrortutor record --replicas 2 kerastuner_search.py WORKDIR
"""

from __future__ import annotations

import hashlib
import sys

from devices import logical_cpus

logical_cpus(2)

import keras  # noqa: E402
import keras_tuner  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def build_model(hp: keras_tuner.HyperParameters) -> keras.Model:
    """A small classifier whose width and learning rate keras-tuner chooses."""
    model = keras.Sequential([
        keras.Input((8,)),
        keras.layers.Dense(hp.Int("units", 4, 8, step=4), activation="relu"),
        keras.layers.Dense(3),
    ])
    model.compile(optimizer=keras.optimizers.SGD(hp.Choice("lr", [0.1, 0.05])),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def digest(arrays) -> str:
    return hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in arrays)).hexdigest()


rng = np.random.default_rng(0)
x = rng.normal(size=(64, 8)).astype("float32")
y = rng.integers(0, 3, size=64)
keras.utils.set_random_seed(0)

tuner = keras_tuner.RandomSearch(
    build_model, objective="loss", max_trials=2, seed=0,
    distribution_strategy=tf.distribute.MirroredStrategy(),
    directory=sys.argv[1], project_name="search", overwrite=True)
tuner.search(x, y, epochs=2, batch_size=16, verbose=0)

for trial in sorted(tuner.oracle.trials.values(), key=lambda t: t.trial_id):
    losses = [repr(float(obs.value[0])) for obs in trial.metrics.get_history("loss")]
    print(trial.trial_id, trial.hyperparameters.values, losses)
(best,) = tuner.get_best_models(1)
print("best weights", digest(best.get_weights()))
