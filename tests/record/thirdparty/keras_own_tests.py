"""Keras's own tf.distribute training programs: two tests shipped in the Keras 3.15.1 wheel.

Third-party code, read from the installed Keras at run time (nothing of it is copied here):

- ``keras/src/backend/tensorflow/distribute_test.py``,
  ``DistributeTest.test_correctness_with_fit_and_regularizer``: ``fit`` on a Dense layer with an
  L1L2 kernel regulariser, once without a strategy and once in a
  ``tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])`` scope (regularisation losses);
- ``keras/src/callbacks/swap_ema_weights_test.py``,
  ``SwapEMAWeightsTest.test_swap_ema_weights_with_tf_distribute``: ``fit`` with an EMA optimizer,
  the ``SwapEMAWeights`` and ``ModelCheckpoint`` callbacks and validation, then ``evaluate`` of the
  model and of its reloaded checkpoint, all under a MirroredStrategy on two CPUs.

Both make their own data (seeded) and their own two logical CPUs (each setUp resets TensorFlow's
context first). They run unchanged, as unittest runs them; Keras 3 is what they were written for.
One thing is added: ``fit`` shuffles every epoch (``shuffle=True`` by default) and the tests set
no seed, so which examples each replica gets changes from run to run, and with it the last bits
of the reported loss (seen: 29.557153701782227 and 29.55714988708496 in two plain runs).
``keras.utils.set_random_seed(0)`` before each ``fit`` makes every run shuffle alike.
What they compute is printed: after every ``fit`` and ``evaluate`` call, its result as exact
floats and the model's weights, bit for bit. Keras's interactive logging is turned off for each
call (``keras.utils.disable_interactive_logging``, a public Keras switch; the tests' setUp clears
Keras's global state, which turns it back on): its progress bar prints wall-clock times.

    python keras_own_tests.py
    python -m mirrortutor record --replicas 2 keras_own_tests.py
"""

from __future__ import annotations

import functools
import hashlib
import sys
import unittest

import keras
import numpy as np
from keras.src.backend.tensorflow.distribute_test import DistributeTest
from keras.src.callbacks.swap_ema_weights_test import SwapEMAWeightsTest

TESTS = [DistributeTest("test_correctness_with_fit_and_regularizer"),
         SwapEMAWeightsTest("test_swap_ema_weights_with_tf_distribute")]


def exact(value) -> str:
    """A number, list or dict of numbers as text that keeps every bit (repr of Python floats)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {exact(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(exact(v) for v in value) + "]"
    return repr(float(value))


def printing(method):
    """``keras.Model.method`` that also prints its result and the weights after it."""
    @functools.wraps(method)
    def wrapper(model, *args, **kwargs):
        keras.utils.disable_interactive_logging()  # again: each test's setUp resets Keras's state
        if method.__name__ == "fit":
            keras.utils.set_random_seed(0)  # fit shuffles each epoch, unseeded in the tests
        result = method(model, *args, **kwargs)
        shown = result.history if isinstance(result, keras.callbacks.History) else result
        weights = b"".join(np.asarray(w).tobytes() for w in model.get_weights())
        print(f"{method.__name__}: {exact(shown)} weights {hashlib.sha256(weights).hexdigest()}")
        return result
    return wrapper


if __name__ == "__main__":
    keras.Model.fit = printing(keras.Model.fit)
    keras.Model.evaluate = printing(keras.Model.evaluate)
    outcome = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(unittest.TestSuite(TESTS))
    sys.exit(0 if outcome.wasSuccessful() and not outcome.skipped else 1)
