"""One multi-worker training job: what every worker trains, how, and what it sends back.

One program, many copies: :class:`~mirrortutor.MultiWorkerCluster` starts
:mod:`~mirrortutor.clusters.worker` once per worker, each process with its own ``TF_CONFIG``.
Every copy builds the same model from the same seed, reads the same :class:`TrainingJob`, and runs
the same custom training loop (:func:`train`); ``MultiWorkerMirroredStrategy`` makes them one
synchronous job. Each worker reports a :class:`WorkerResult` (its trace, losses and final weights)
for the notebook to merge, written in mirrortutor's file format (:meth:`WorkerResult.save`).

:func:`train` takes any strategy, so the same loop runs in the notebook on one machine with
``mt.MirroredStrategy``: the single-machine reference the multi-worker run must match.

``TrainingJob(loop="fit")`` runs the same job with Keras ``model.fit`` instead of the custom loop
(:mod:`.fit`): under ``MultiWorkerMirroredStrategy``, TensorFlow's or mirrortutor's, that fails
(keras-team/keras#20585); it runs under ``MirroredStrategy``.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import JobConfigError, WorkerIndexError
from ..record import persist
from ..record.records import Recording
from ..record.trace import Trace
from ..validate import is_whole
from .jobdata import build_model, make_dataset

LOOPS = ("custom", "fit")  # a custom training loop, or Keras model.fit
RECORDINGS = ("auto", "sample", "first_step")  # what each worker's strategy records (recording())
BACKUPS = ("per_worker", "shared")  # where each worker's BackupAndRestore writes (loop="fit")
SHARD_POLICIES = ("AUTO", "DATA", "FILE", "OFF")  # tf.data.experimental.AutoShardPolicy names
COMMUNICATIONS = ("AUTO", "RING", "NCCL")  # tf.distribute.experimental.CommunicationImplementation


@dataclass(frozen=True)
class TrainingJob:
    """What every worker trains: the same on all of them (the launcher sends each a copy)."""

    dataset: str = "digits"  # an mt.data name; offline sets only
    examples: int = 512  # use the first `examples` examples, in order
    global_batch_size: int = 64  # examples per step over ALL replicas of ALL workers
    steps: int = 16  # training steps in all (a resumed run continues to this same step)
    learning_rate: float = 0.1  # plain SGD
    hidden: int = 16  # units of the one hidden layer
    seed: int = 1  # weights' seed: the same on every worker, and in the single-machine reference
    shard_policy: str = "DATA"  # how workers split the data: AUTO, DATA, FILE or OFF
    communication: str = "RING"  # collective implementation: AUTO, RING or NCCL (GPU only)
    checkpoint_every: int = 0  # save a checkpoint every N steps (0: never)
    files: int = 0  # 0: data from memory; N: the examples written round-robin into N TFRecord files
    loop: str = "custom"  # "custom" (a tf.function step) or "fit" (Keras model.fit(dataset, epochs))
    shuffle_seed: int | None = None  # None: the examples in order; a seed: shuffled once with it
    straggler: int | None = None  # a replica (replica_id_in_sync_group) slow at every gradient:
    straggler_factor: float = 1.0  # ...as mt.Straggler: it takes factor × as long,
    straggler_delay: float = 0.0  # ...plus this many seconds (custom loop only)
    recording: str = "auto"  # "auto" (every step ≤ 200 steps), "sample" or "first_step": recording()
    backup: str = "per_worker"  # fit's BackupAndRestore folder: one per worker, or "shared" by all

    @property
    def steps_per_epoch(self) -> int:
        """Full global batches in one pass over the examples (the last partial one is dropped)."""
        return self.examples // self.global_batch_size

    def __post_init__(self) -> None:
        for name in ("examples", "global_batch_size", "steps", "hidden"):
            value = getattr(self, name)
            if not is_whole(value) or value < 1:
                raise JobConfigError(
                    f"TrainingJob.{name} must be a whole number of at least 1, but got "
                    f"{value!r}. For example mt.TrainingJob({name}={getattr(TrainingJob, name)}).")
        if self.global_batch_size > self.examples:
            raise JobConfigError(
                f"global_batch_size={self.global_batch_size} is larger than the "
                f"{self.examples} examples, so not one full batch exists. Use more examples "
                f"or a smaller global batch.")
        if self.shuffle_seed is not None and (not is_whole(self.shuffle_seed)
                                              or self.shuffle_seed < 0):
            raise JobConfigError(f"shuffle_seed must be None (the examples in order) or a whole "
                                 f"number >= 0, got {self.shuffle_seed!r}.")
        if not is_whole(self.files) or self.files < 0:
            raise JobConfigError(f"files must be 0 (data from memory) or a number of files, "
                                 f"got {self.files!r}.")
        if self.checkpoint_every < 0:
            raise JobConfigError(f"checkpoint_every must be 0 (never) or positive, got "
                                 f"{self.checkpoint_every!r}.")
        if self.loop == "fit" and self.steps % self.steps_per_epoch:
            raise JobConfigError(
                f"With loop='fit', steps counts whole epochs: model.fit(dataset, epochs=…) runs "
                f"{self.examples} // {self.global_batch_size} = {self.steps_per_epoch} steps per "
                f"epoch, and {self.steps} steps is not a whole number of epochs. Use steps="
                f"{self.steps_per_epoch * max(1, round(self.steps / self.steps_per_epoch))}.")
        if self.loop == "fit" and self.checkpoint_every not in (0, self.steps_per_epoch):
            raise JobConfigError(
                f"With loop='fit', checkpoints are Keras's BackupAndRestore at the end of each "
                f"epoch: checkpoint_every must be 0 or the {self.steps_per_epoch} steps of one "
                f"epoch, not {self.checkpoint_every}.")
        if self.straggler is not None and (not is_whole(self.straggler) or self.straggler < 0
                                           or self.loop != "custom"):
            raise JobConfigError(
                f"straggler must be None or a replica's replica_id_in_sync_group (0, 1, …), with "
                f"loop='custom'; got straggler={self.straggler!r}, loop={self.loop!r}.")
        if not (isinstance(self.straggler_delay, (int, float)) and 0 <= self.straggler_delay < 60
                and isinstance(self.straggler_factor, (int, float))
                and 1 <= self.straggler_factor < 100):
            raise JobConfigError(
                f"A straggler needs straggler_factor from 1 to 100 and straggler_delay from 0 to "
                f"60 seconds, got {self.straggler_factor!r} and {self.straggler_delay!r}.")
        for name, allowed in (("shard_policy", SHARD_POLICIES), ("communication", COMMUNICATIONS),
                              ("loop", LOOPS), ("recording", RECORDINGS),
                              ("backup", BACKUPS)):
            if getattr(self, name) not in allowed:
                raise JobConfigError(
                    f"TrainingJob.{name} must be one of {', '.join(allowed)} (TensorFlow's own "
                    f"names), but got {getattr(self, name)!r}.")


@dataclass
class WorkerResult:
    """What one worker did, as it reported it (or as the launcher saw it die)."""

    worker: int  # the worker's index in TF_CONFIG's "worker" list
    status: str  # "finished", "failed" (raised an error) or "killed" (died without a word)
    tf_config: dict[str, Any]  # the TF_CONFIG this process ran with
    is_chief: bool = False  # whether this worker wrote the checkpoints that are kept
    devices: list[str] = field(default_factory=list)  # this worker's replica devices
    num_replicas_in_sync: int = 0  # replicas of the whole cluster
    communication: str = ""  # the CommunicationImplementation asked for
    first_step: int = 0  # step it started at (> 0: resumed from a checkpoint)
    steps_done: int = 0  # steps completed by this process
    losses: list[float] = field(default_factory=list)  # global mean loss of each step it ran
    step_times: list[float] = field(default_factory=list)  # s from its first step's start to each end
    weight_names: list[str] = field(default_factory=list)  # model weights' paths
    weights: list[np.ndarray] = field(default_factory=list)  # model weights at the end (numpy)
    trace: Trace | None = None  # this worker's mt.Trace: only its own replicas
    checkpoints: list[str] = field(default_factory=list)  # checkpoint paths it saved (chief: kept)
    restored_from: str | None = None  # checkpoint it resumed from
    error: str | None = None  # the error's last line, when it failed
    exit_code: int | None = None  # process exit code (-9: SIGKILL), filled in by the launcher
    seconds: float = 0.0  # from TensorFlow's start to the end of training

    def save(self, path) -> None:
        """Write this result, its trace included, in mirrortutor's file format
        (:mod:`mirrortutor.record.persist`, as ``mirrortutor-worker-result``): what a worker
        process hands to the notebook."""
        persist.write(path, "worker-result", self)

    @classmethod
    def load(cls, path) -> "WorkerResult":
        """Read a result written by :meth:`save`."""
        return persist.read(path, "worker-result", {"WorkerResult": cls})


def train(strategy, job: TrainingJob, *, checkpoint_dir: str | None = None,
          kill_at_step: int | None = None, result: WorkerResult | None = None,
          data_dir: str | None = None, scratch_dir: str | None = None,
          on_step: Callable[[int], None] | None = None) -> WorkerResult:
    """Run ``job`` with ``strategy`` (any tf.distribute strategy) in a custom loop.

    With ``checkpoint_dir`` it first restores the latest checkpoint there (if any) and continues
    from its step, and saves every ``job.checkpoint_every`` steps. Every worker calls ``save``
    (saving is a collective step), but only the chief's files land in ``checkpoint_dir``; the
    others write to a scratch directory and delete it: TF's ``should_checkpoint`` says which.
    ``kill_at_step``: the process kills itself (SIGKILL) just before that step, like a crash.
    ``on_step(n)`` hears after each step that ``n`` steps of the job are done (a progress bar).
    ``job.straggler``: that replica is slow at every gradient (as ``mt.Straggler``: factor × the
    time, plus the delay), before the all-reduce, so every replica's step waits for it.
    """
    import keras
    import tensorflow as tf

    result = result or WorkerResult(worker=0, status="running", tf_config={})
    if job.loop == "fit":
        from .fit import train_fit

        return train_fit(strategy, job, kill_at_step=kill_at_step, result=result,
                         checkpoint_dir=checkpoint_dir, data_dir=data_dir, on_step=on_step)
    replicas = int(strategy.num_replicas_in_sync)
    slow = straggler_wait(job, replicas)
    with strategy.scope():
        model = build_model(job)
        optimizer = keras.optimizers.SGD(job.learning_rate)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    describe(strategy, result)

    manager, scratch = None, None
    if checkpoint_dir is not None:
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest:
            checkpoint.restore(latest).assert_existing_objects_matched()
            result.restored_from = os.path.basename(latest)
        write_dir = checkpoint_dir
        if not result.is_chief:
            write_dir = scratch = scratch_dir or tempfile.mkdtemp(prefix="mirrortutor-ckpt-")
        manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=3)
    start = int(optimizer.iterations.numpy())
    result.first_step = start
    dist = iter(strategy.experimental_distribute_dataset(make_dataset(job, start, data_dir)))
    gb = job.global_batch_size

    @tf.function
    def train_step(batch):
        def replica_step(index, x, y):
            began = tf.timestamp()
            with tf.GradientTape() as tape:
                per_example = loss_fn(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=gb)
            grads = tape.gradient(loss, model.trainable_variables)
            if slow is not None:  # the straggler waits before its gradient joins the all-reduce
                replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                with tf.control_dependencies([slow.wait(replica, began)]):
                    grads = [tf.identity(g) for g in grads]
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # LOCAL grads
            return loss

        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    t0 = time.monotonic()
    try:
        for step in range(start, job.steps):
            if kill_at_step == step:
                os.kill(os.getpid(), signal.SIGKILL)
            result.losses.append(float(train_step(next(dist))))  # float(): the step has ended
            result.step_times.append(time.monotonic() - t0)
            result.steps_done += 1
            if on_step is not None:
                on_step(step + 1)
            if manager is not None and job.checkpoint_every and (step + 1) % job.checkpoint_every == 0:
                path = manager.save(checkpoint_number=step + 1)
                if result.is_chief:
                    result.checkpoints.append(os.path.basename(path))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return finished(model, result)


def recording(job: TrainingJob) -> Recording:
    """What each worker's strategy records: every step in full for short "auto" jobs (what the
    chapters read), mt.Recording()'s bounded sample for long ones or "sample", step 0 only for
    "first_step" (timed runs: the later steps pass the recorder's cheap gate)."""
    if job.recording == "first_step":
        return Recording.first_step()
    if job.recording == "auto" and job.steps <= 200:
        return Recording.everything()
    return Recording()


def straggler_wait(job: TrainingJob, replicas: int):
    """The job's straggler as a :class:`~.stragglers.SlowDown` (None without one)."""
    if job.straggler is None:
        return None
    if job.straggler >= replicas:
        raise WorkerIndexError(
            f"TrainingJob(straggler={job.straggler}) names a replica this strategy does not have: "
            f"its replicas are 0 to {replicas - 1}. Pick one of those.")
    from .stragglers import SlowDown, Straggler

    return SlowDown([Straggler(job.straggler, float(job.straggler_factor),
                               float(job.straggler_delay))], replicas)


def describe(strategy, result: WorkerResult) -> None:
    """Fill in who this process is in the cluster: chief or not, its devices, all replicas."""
    result.is_chief = bool(strategy.extended.should_checkpoint)
    result.devices = list(strategy.extended.worker_devices)
    result.num_replicas_in_sync = int(strategy.num_replicas_in_sync)


def finished(model, result: WorkerResult) -> WorkerResult:
    """Record the model's final weights; the run is finished."""
    result.weight_names = [w.path for w in model.weights]
    result.weights = [w.numpy() for w in model.weights]
    result.status = "finished"
    return result


def job_dict(job: TrainingJob) -> dict:
    """The job as plain JSON-able values (what the launcher writes into config.json)."""
    return asdict(job)
