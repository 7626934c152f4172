"""The wall, cluster half: TensorFlow's private API for the eager context and its clusters.

:mod:`.hooks` and :mod:`.graph` hold what the instrumented strategies need; this module
holds what the clusters need: whether the runtime started, whether this process's eager context
serves a cluster, and the few places where TensorFlow's ``ClusterCoordinator`` offers no public way
to stop in bounded time or to give up on steps no worker will ever run. The folder is the
whole wall (``tests/core/test_layout.py`` holds it): a TensorFlow upgrade that moves a private
name breaks here, and the cluster tests (``tests/clusters``) say so at once.

Checked against TensorFlow 2.21. Each use says *why* no public API does it.
"""

from __future__ import annotations

import tensorflow as tf
# Why: the eager context knows whether the runtime started and which cluster it serves; tf.config
# only raises *after* the fact, and nothing public updates a running coordinator's cluster.
from tensorflow.python.eager import context

__all__ = ["connected_to_cluster", "fail_pending_steps", "live_coordinators", "pending_steps",
           "point_coordinator_at", "runtime_started", "stop_coordinator"]


def runtime_started() -> bool:
    """Whether TensorFlow's runtime has started (logical devices can no longer change)."""
    return context.context()._context_handle is not None


def connected_to_cluster() -> bool:
    """Whether this process's eager context serves a cluster (it cannot be undone)."""
    return context.get_server_def() is not None


def point_coordinator_at(spec: dict) -> None:
    """Point an already connected coordinator's server at another cluster (update, not reset).

    TF can neither close the coordinator's gRPC server nor open a second one on its port.
    """
    current = context.get_server_def()
    if current is None:
        return
    server_def = tf.compat.v1.train.ServerDef()
    server_def.CopyFrom(current)
    server_def.cluster.CopyFrom(tf.train.ClusterSpec(spec).as_cluster_def())
    context.context().update_server_def(server_def)


# ---- a ClusterCoordinator that stops, and steps that give up ---------------------------------------
def live_coordinators() -> list:
    """Every ``ClusterCoordinator`` alive in this process and not stopped by :func:`stop_coordinator`.

    A program makes its own (``ClusterCoordinator(strategy)``, one per strategy), beside the one a
    ``LocalCluster`` made; a cluster that stops, or gives up on its steps, must reach them all. TF
    keeps no list of them (each lives on in its worker threads), so the garbage collector's list of
    objects is searched: ~0.1 s, paid only when a cluster stops or fails.
    """
    import gc

    kind = tf.distribute.coordinator.ClusterCoordinator
    return [o for o in gc.get_objects()
            if isinstance(o, kind) and not getattr(o, "_mirrortutor_stopped", False)]


def stop_coordinator(coordinator) -> None:
    """Stop a ClusterCoordinator's threads at once, whatever the workers' state.

    Why private: ``ClusterCoordinator`` has no public stop, and TF's own ``Cluster.stop()`` can
    block for ever. It first takes the failure handler's lock, and once a worker has died the
    handler's thread holds that lock inside ``update_server_def``, whose first RPC waits for the
    dead worker to come back (TF waits up to ``_WORKER_MAXIMUM_RECOVERY_SEC`` = 3600 s; seen on TF
    2.21: ``stop()`` blocked past 20 s, and TF's stop never finished within 2 minutes). So do what
    ``Cluster.stop()`` does without that lock: tell the handler's thread to end after its current
    attempt, stop the workers' loops, the queue and the resource functions; and make the later
    ``stop()`` that TF's ``ClusterCoordinator.__del__`` runs skip the lock too, so no garbage
    collection can block the kernel.
    """
    coordinator._mirrortutor_stopped = True
    cluster = coordinator._cluster
    handler = cluster.failure_handler
    handler._should_preemption_thread_run = False
    handler._cluster_due_for_update_or_finish.set()
    handler.stop = lambda: None  # the locked part of TF's stop: done above, without the lock
    for worker in cluster.workers:
        worker.stop()
    cluster.closure_queue.stop()
    cluster.resource_cancellation_mgr.start_cancel()


def pending_steps(coordinator) -> int:
    """Scheduled functions not finished yet: queued, running, or waiting for a worker.

    Why private: ``ClusterCoordinator.done()`` answers the same question but raises (and clears)
    the first error, which ``join()`` must still see.
    """
    queue = coordinator._cluster.closure_queue
    with queue._queue_lock:
        return queue._queue.qsize() + queue._inflight_closure_count


def fail_pending_steps(coordinator, error: Exception, *, only_if_pending: bool = True) -> bool:
    """Make the coordinator's ``join()`` (or next ``schedule()``) raise ``error``, as TF does with
    the first error of a step; the steps still queued are cancelled. Returns whether it was set.

    Why private: a step whose workers are all dead is put back in TF's queue to wait up to an hour
    for one to return, and TF's public API has no timeout for ``join()``. This sets the queue's
    error the way TF's own ``mark_failed`` does, without needing a step in flight.
    """
    queue = coordinator._cluster.closure_queue
    with queue._queue_lock:
        if queue._error is not None or not queue._should_process_closures:
            return False
        if only_if_pending and queue._queue.empty() and queue._inflight_closure_count == 0:
            return False
        queue._error = error
        queue._stop_waiting_condition.notify_all()
    return True
