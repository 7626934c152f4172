"""Slow workers, and what both SGD trainers share: making a worker slow, and scoring the weights.

A :class:`Straggler` is a worker (asynchronous training) or a replica (synchronous training) whose
every gradient takes ``factor`` times as long as it really did, plus ``delay`` seconds. The wait is
a real sleep on the device running the step, so the synchronous all-reduce really waits for it and
the asynchronous update really arrives late. :mod:`~mirrortutor.training.asyncsgd` and
:mod:`~mirrortutor.training.syncsgd` both use the helpers here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from ..errors import InvalidQuantityError, WorkerIndexError
from ..record.tf_internals.graph import data_sleep, independent
from ..validate import is_whole

__all__ = ["Straggler", "SlowDown", "accuracy_and_loss", "checked_stragglers", "sleep", "straggle"]


@dataclass(frozen=True)
class Straggler:
    """A slow worker: each of its gradients takes ``factor`` times as long, plus ``delay`` s."""

    worker: int  # which worker (0 .. workers - 1), or which replica in synchronous training
    factor: float = 1.0  # 3.0: computing a gradient takes three times as long as it really did
    delay: float = 0.0  # seconds added to every step, on top of the factor


def checked_stragglers(stragglers, count: int, unit: str, owner: str) -> list[Straggler]:
    """Stragglers as a list (a ``{index: factor}`` dict is accepted), each checked against the
    ``count`` workers (or replicas: ``unit``) that ``owner`` has."""
    if isinstance(stragglers, dict):
        stragglers = [Straggler(w, f) for w, f in stragglers.items()]
    for s in stragglers:
        if not is_whole(s.worker) or not 0 <= s.worker < count:
            raise WorkerIndexError(
                f"A straggler was asked for on {unit} {s.worker!r}, but {owner} has {unit}s 0 "
                f"to {count - 1}. Pick one of those, e.g. Straggler(worker=1, factor=3).")
        if not (s.factor >= 1.0 and s.delay >= 0.0 and np.isfinite(s.factor + s.delay)):
            raise InvalidQuantityError(
                f"A straggler needs factor >= 1 and delay >= 0 seconds, but got "
                f"factor={s.factor}, delay={s.delay} for {unit} {s.worker}.")
    return list(stragglers)


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


class SlowDown:
    """Each worker's (or replica's) straggler factor and delay, as constants a step can index."""

    def __init__(self, stragglers: list[Straggler], count: int):
        factors, delays = np.ones(count), np.zeros(count)
        for s in stragglers:
            factors[s.worker], delays[s.worker] = s.factor, s.delay
        self.factors = tf.constant(factors, tf.float64)
        self.delays = tf.constant(delays, tf.float64)

    def wait(self, who, start):
        """Inside a step: sleep (factor - 1) × the time since ``start``, plus the delay."""
        seconds = (tf.gather(self.factors, who) - 1.0) * (tf.timestamp() - start) + \
            tf.gather(self.delays, who)
        return sleep(seconds)


def accuracy_and_loss(model, loss_fn, data) -> dict[str, float]:
    """Loss and accuracy of ``model``'s current weights on ``data`` (a ``mt.data.Dataset``)."""
    logits = model(data.x, training=False)
    loss = float(tf.reduce_mean(loss_fn(data.y, logits)))
    accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == data.y))
    return {"loss": loss, "accuracy": accuracy}
