"""Stragglers on purpose: ``mt.straggle``, the one line a chapter adds to a training step to make
one replica (or one parameter-server worker) slow, and the sleep it is built on.

The wait is a real sleep on the device running the step, so a synchronous all-reduce really waits
for it and an asynchronous update really arrives late. Stock TensorFlow has no such line: delete
it and the step is TF's own.
"""

from __future__ import annotations

import tensorflow as tf

from ..errors import InvalidQuantityError, WorkerIndexError
from ..record.tf_internals.graph import data_sleep, independent

__all__ = ["sleep", "straggle"]


def sleep(seconds):
    """Sleep on the device running the step (a tf.data sleep: TF has no plain sleep op).

    TF's sleep transformation sleeps before *every* request for an element, the final "no more
    elements" included, so a one-element dataset read to its end sleeps twice: ``take(1)`` stops
    after the one element. A wait of 0 skips the dataset altogether (``tf.cond``): building and
    reading it costs ~10 ms on 2 cores, which every replica and worker would otherwise pay at every
    step, straggler or not. Measured here: 0 s → 0.4 ms, 50 ms → 62 ms, 100 ms → 108 ms.
    """
    us = tf.cast(tf.maximum(seconds, 0.0) * 1e6, tf.int64)

    def wait():
        ds = tf.data.Dataset.range(1).apply(data_sleep(us)).take(1)
        return ds.reduce(tf.constant(0, tf.int64), lambda a, b: a + b)

    return tf.cond(us > 0, wait, lambda: tf.constant(0, tf.int64))


def straggle(x, seconds: float, *, replica: int | None = None, worker: int | None = None):
    """``x`` unchanged, handed on only after one replica (or one parameter-server worker) waited
    ``seconds``: the course's one line that makes a straggler, put in a training step as

        x = mt.straggle(x, 0.1, replica=2)   # replica 2 is slow (stock TF: delete the line)

    In a replica function (``strategy.run``), ``replica`` is compared with the replica context's
    ``replica_id_in_sync_group``; in a function scheduled on a ``ClusterCoordinator``, ``worker``
    with ``tf.distribute.coordinator.experimental_get_current_worker_index()``. Every other replica
    or worker goes straight on. The wait is a real sleep on the device running the step, before
    anything that reads ``x``: a synchronous all-reduce really waits for it, and an asynchronous
    update really arrives late. ``x`` may be a tensor or a nest of them (a batch ``(x, y)``).

    The wait costs more than ``seconds``: the sleep is a one-element ``tf.data`` dataset, built and
    read in the step (:func:`sleep`), ~10 ms more on 2 cores. Predict a straggler's cost from one
    measured straggle (chapter 09 does: the step it slows), not from ``seconds`` alone.
    """
    if (replica is None) == (worker is None):
        raise InvalidQuantityError(
            f"mt.straggle needs exactly one of replica= (synchronous training: which replica is "
            f"slow) or worker= (a parameter-server worker), but got replica={replica!r}, "
            f"worker={worker!r}. For example: x = mt.straggle(x, 0.1, replica=2).")
    if not (isinstance(seconds, (int, float)) and 0 <= seconds < float("inf")):
        raise InvalidQuantityError(
            f"mt.straggle's wait must be a number of seconds, 0 or more, but got {seconds!r}.")
    if replica is not None:
        context = tf.distribute.get_replica_context()
        if context is None or tf.distribute.in_cross_replica_context():
            raise WorkerIndexError(
                "mt.straggle(..., replica=) runs inside a replica function (the function given "
                "to strategy.run), where each replica knows its number; here there is none. Move "
                "the line into the step that strategy.run runs.")
        who, target = context.replica_id_in_sync_group, replica
    else:
        who, target = tf.distribute.coordinator.experimental_get_current_worker_index(), worker
    # The sleep starts once x is ready (the control dependencies), and only then: inside
    # tf.function, automatic control dependencies would otherwise chain it in program order with
    # every stateful op traced after it, so the replicas traced after the slow one (and their
    # timeline stamps) would wait for its sleep too, and look slow themselves (independent()).
    ready = [t for t in tf.nest.flatten(x) if t is not None]
    with independent(), tf.control_dependencies(ready):
        waited = tf.cond(tf.equal(tf.cast(who, tf.int64), target), lambda: sleep(float(seconds)),
                         lambda: tf.constant(0, tf.int64))
    with tf.control_dependencies([waited]):
        return tf.nest.map_structure(tf.identity, x)
