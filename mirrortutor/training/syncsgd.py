"""``mt.SyncSGD``: synchronous SGD under ``MirroredStrategy``, the contrast to :class:`~mirrortutor.AsyncSGD`.

Chapters 06 and 07 train the same model two ways. :class:`AsyncSGD` lets every worker update the
weights on the ps whenever its gradient is ready; :class:`SyncSGD` is the synchronous way. Both
apply plain SGD, ``w -= lr * g`` with ``g`` the gradient of the mean loss over the update's
examples, but the updates are not the same size: a synchronous update averages over
``batch_size * num_replicas_in_sync`` examples, an asynchronous one over one worker's
``batch_size``. At the same ``learning_rate`` a synchronous update therefore moves the weights
N times less per example; the linear scaling rule (Goyal et al. 2017, *Accurate, Large Minibatch
SGD*) multiplies its rate by N to compare the two at equal examples. On one replica, ``SyncSGD``
is plain sequential SGD: the staleness-free baseline of an N-worker ``AsyncSGD``. One step:

1. every replica computes the gradient of its shard of the global batch (loss divided by the
   *global* batch size, as ``tf.nn.compute_average_loss`` does);
2. a straggler replica then waits, exactly as :class:`~mirrortutor.Straggler` makes an
   asynchronous worker wait;
3. the gradients are summed across replicas (``strategy.reduce``: it needs *every* replica's
   gradient, so the step waits for the slowest): with step 1's division, the mean over the
   global batch. ``w -= lr * g`` is then applied in cross-replica context, the same value to
   every copy, which is why the weights need no aggregation (``NONE``) and never drift apart.

Each update is recorded as a :class:`SyncStep`. The staleness of a synchronous update is always 0:
every gradient was computed from the weights it is applied to.

``fail_at`` makes one replica raise inside step ``fail_at``, as a crashed replica would stop a
synchronous step: the whole step fails and no copy of the weights changes. :attr:`SyncSGD.step`
(a variable, so ``tf.train.Checkpoint`` saves it) says how many updates were applied; ``fit``
continues from it, skipping the batches already used, so a run restored from a checkpoint meets
the same batches an uninterrupted run would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from ..errors import InvalidQuantityError
from ..progress import progress
from ..record.tf_internals.graph import independent
from ..validate import whole_number
from .stragglers import SlowDown, accuracy_and_loss, checked_stragglers


@dataclass
class SyncStep:
    """One synchronous update: every replica's gradient, summed, applied to every copy."""

    step: int  # the update's number (0, 1, 2 …): also the weights' version it was computed from
    loss: float  # the global batch's mean loss, before the update
    grad_norm: float  # L2 norm of the summed gradient
    learning_rate: float  # the rate used (always the same: nothing is stale)
    apply_time: float  # seconds since this trainer's first fit started, when the step ended
    step_seconds: float  # wall-clock seconds of this step (the slowest replica's time and more)
    examples: int  # the global batch: batch_size * num_replicas_in_sync


class SyncTrace:
    """The updates of one or more ``SyncSGD.fit`` calls, in order."""

    def __init__(self, steps: list[SyncStep], replicas: int):
        self.steps = steps
        self.replicas = replicas  # num_replicas_in_sync: the "workers" of a synchronous run

    def column(self, name: str) -> np.ndarray:
        """One field of every step as an array, e.g. ``trace.column("loss")`` (as AsyncTrace)."""
        return np.array([getattr(s, name) for s in self.steps])

    def examples_seen(self) -> np.ndarray:
        """Examples the weights had been trained on before each step (as AsyncTrace)."""
        return np.cumsum([0] + [s.examples for s in self.steps])[:-1]

    def staleness(self) -> np.ndarray:
        """Always zeros: a synchronous gradient is applied to the weights it was computed from."""
        return np.zeros(len(self.steps), dtype=int)

    def median_step_seconds(self) -> float:
        return float(np.median(self.column("step_seconds"))) if self.steps else float("nan")

    def __repr__(self) -> str:
        return f"<SyncTrace: {len(self.steps)} synchronous updates on {self.replicas} replicas>"


class SyncSGD:
    """Synchronous SGD of a Keras model on a ``MirroredStrategy`` (``mt.`` or plain ``tf.``).

    ``model_fn`` builds the model (called in the strategy's scope: one copy per replica).
    ``stragglers``: :class:`~mirrortutor.Straggler` records (``worker`` = replica index), or
    ``{replica: factor}``. ``batch_size`` in ``fit`` is per replica, as in ``AsyncSGD`` where it
    is per worker: one synchronous step uses ``batch_size * num_replicas_in_sync`` examples.
    ``accumulate=k``: gradient accumulation, each update adding up ``k`` such micro-batches.
    """

    def __init__(self, strategy, model_fn, *, learning_rate: float = 0.1, stragglers=(),
                 loss_fn=None, accumulate: int = 1):
        replicas = strategy.num_replicas_in_sync
        stragglers = checked_stragglers(stragglers, replicas, "replica", "this strategy")
        if not learning_rate > 0:
            raise InvalidQuantityError(f"learning_rate must be positive, got {learning_rate}.")
        self.accumulate = whole_number(
            accumulate, InvalidQuantityError, f"accumulate must be a whole number >= 1 (the "
            f"micro-batches added up before each update), got {accumulate!r}.")
        self.strategy, self.replicas = strategy, replicas
        self.learning_rate = float(learning_rate)
        self._slow = SlowDown(stragglers, replicas)
        self.loss_fn = loss_fn or keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none")
        with strategy.scope():
            self.model = model_fn()
            # Updates applied so far. A variable, so a tf.train.Checkpoint saves and restores it.
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="sync_step")
            # With accumulation: each replica's own running sum of its loss and local gradients
            # (sync-on-read, chapter 01: adding to it needs no communication).
            self._sums = [tf.Variable(tf.zeros(shape), trainable=False,
                                      synchronization=tf.VariableSynchronization.ON_READ,
                                      aggregation=tf.VariableAggregation.SUM)
                          for shape in [()] + [v.shape for v in self.model.trainable_variables]
                          ] if self.accumulate > 1 else []
        self._steps: list[SyncStep] = []
        self._t0: float | None = None
        self._step_fn = tf.function(self._step)
        self._micro_fn = tf.function(self._micro)
        self._apply_sums_fn = tf.function(self._apply_sums)

    def _gradients(self, x, y, global_batch_size, fail_at):
        """In replica context: this replica's loss and local gradients, a straggler waiting."""
        ctx = tf.distribute.get_replica_context()
        replica = tf.cast(ctx.replica_id_in_sync_group, tf.int64)
        with independent():  # a slow replica must not hold up the replicas traced after it
            start = tf.timestamp()
        with tf.GradientTape() as tape:
            per_example = self.loss_fn(y, self.model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
        grads = tape.gradient(loss, self.model.trainable_variables)
        # A failing replica (fail_at): replica 1, or 0 if it is alone, raises in this step.
        crashed = tf.logical_and(tf.equal(self.step, fail_at),
                                 tf.equal(replica, min(1, self.replicas - 1)))
        with independent():
            check = tf.debugging.Assert(tf.logical_not(crashed),
                                        ["a replica failed in step", self.step])
            wait = self._slow.wait(replica, start)  # sleep() skips a wait of 0
        with tf.control_dependencies([wait, check]):
            return [tf.identity(loss)] + [tf.identity(g) for g in grads]

    def _step(self, batch, global_batch_size, fail_at):
        def replica_step(x, y):
            return self._gradients(x, y, global_batch_size, fail_at)

        return self._apply(self.strategy.run(replica_step, args=batch))

    def _apply(self, per_replica):
        # Cross-replica context: summing needs every replica's value, the slowest included.
        loss, *grads = [self.strategy.reduce("SUM", v, axis=None) for v in per_replica]
        updates = [w.assign_sub(self.learning_rate * g)  # on every replica's copy
                   for w, g in zip(self.model.trainable_variables, grads)]
        with tf.control_dependencies(updates):  # a failed step must not count as applied
            self.step.assign_add(1)
        return loss, tf.linalg.global_norm(grads)

    def _micro(self, batch, global_batch_size, fail_at):
        """One micro-batch: each replica adds its loss and gradients to its own sums."""
        def replica_step(x, y):
            values = self._gradients(x, y, global_batch_size, fail_at)
            with tf.control_dependencies([s.assign_add(v) for s, v in zip(self._sums, values)]):
                return tf.identity(values[0])

        return self.strategy.run(replica_step, args=batch)

    def _apply_sums(self):
        """After ``accumulate`` micro-batches: one all-reduce of the sums, one update."""
        def replica_sums():  # in replica context, each replica reads its own copy
            return [tf.identity(s.read_value()) for s in self._sums]

        result = self._apply(self.strategy.run(replica_sums))
        with tf.control_dependencies(list(result)):
            for s in self._sums:
                s.assign(tf.zeros_like(s))
        return result

    def fit(self, data, steps: int, batch_size: int = 32, seed: int = 0,
            fail_at: int | None = None) -> SyncTrace:
        """Run ``steps`` synchronous updates, continuing from :attr:`step`.

        ``data`` is a :class:`mirrortutor.data.Dataset`, shuffled with ``seed`` and repeated; the
        batches already used (``step`` of them) are skipped, so resuming from a checkpoint sees
        the same batches. ``fail_at``: the update number at which one replica raises. With
        ``accumulate=k`` each update adds up ``k`` micro-batches of ``batch_size`` per replica
        (each its own ``strategy.run``, with no communication), then all-reduces once: the
        update of one batch ``k`` times larger, with ``k`` times fewer all-reduces.
        """
        whole_number(steps, InvalidQuantityError, f"steps must be a whole number >= 1, got "
                     f"{steps!r}.")
        k = self.accumulate
        global_batch_size = batch_size * self.replicas  # of one (micro-)batch
        done = int(self.step.numpy())
        ds = data.to_tf(with_index=False, shuffle=True, seed=seed).repeat().batch(
            global_batch_size, drop_remainder=True).skip(done * k).take(steps * k)
        fail = tf.constant(-1 if fail_at is None else fail_at, tf.int64)
        if self._t0 is None:
            self._t0 = time.time()
        with progress(steps, "synchronous updates", unit="update") as bar:
            for i, batch in enumerate(self.strategy.experimental_distribute_dataset(ds)):
                if i % k == 0:
                    start = time.time()
                if k == 1:
                    loss, norm = self._step_fn(batch, global_batch_size, fail)
                else:  # the loss is divided by every example of the update
                    self._micro_fn(batch, global_batch_size * k, fail)
                    if i % k < k - 1:
                        continue
                    loss, norm = self._apply_sums_fn()
                loss, norm = float(loss), float(norm)  # waits for the step to finish
                end = time.time()
                self._steps.append(SyncStep(done, loss, norm, self.learning_rate, end - self._t0,
                                            end - start, global_batch_size * k))
                done += 1
                bar.update(1)
        return self.trace()

    def trace(self) -> SyncTrace:
        """Every update this trainer applied so far."""
        return SyncTrace(list(self._steps), self.replicas)

    def weights(self) -> list[np.ndarray]:
        """The trained weights (replica 0's copy: every copy is the same)."""
        return [np.array(w.numpy()) for w in self.model.trainable_variables]

    def evaluate(self, data) -> dict[str, float]:
        """Loss and accuracy of the current weights on ``data``."""
        return accuracy_and_loss(self.model, self.loss_fn, data)
