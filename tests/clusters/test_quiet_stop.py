"""A stopped cluster's coordinator threads fail quietly: their errors go to the coordinator log.

TensorFlow's closure threads may still be finishing a scheduled function when ``stop()`` kills the
tasks; the thread then dies with a traceback that Python prints wherever the kernel is, cells
later. ``stop()`` marks those threads first, so their errors are kept in ``cluster.coordinator_log``.
"""

from __future__ import annotations

import threading

from mirrortutor.clusters.watch import COORDINATOR_LOG, quiet_after_stop


def _failing_thread(name: str, started: threading.Event, go: threading.Event) -> threading.Thread:
    def body():
        started.set()
        go.wait(10)
        raise ConnectionError("the task was killed")
    return threading.Thread(target=body, name=name, daemon=True)


def test_a_stopped_clusters_thread_error_is_logged_not_printed(capsys):
    started, go = threading.Event(), threading.Event()
    thread = _failing_thread("WorkerClosureProcessingLoop-7", started, go)
    thread.start()
    started.wait(10)
    quiet_after_stop()
    go.set()
    thread.join(10)
    assert "Traceback" not in capsys.readouterr().err
    assert COORDINATOR_LOG.messages[-1] == (
        "WorkerClosureProcessingLoop-7 after stop(): ConnectionError: the task was killed")


def test_other_threads_errors_go_where_they_went_before(monkeypatch):
    """Any other thread's error still reaches the hook that was in place (Python's printer)."""
    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.thread.name))
    started, go = threading.Event(), threading.Event()
    quiet_after_stop()
    thread = _failing_thread("someone-elses-thread", started, go)
    thread.start()
    go.set()
    thread.join(10)
    assert seen == ["someone-elses-thread"]
