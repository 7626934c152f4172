"""A step timeline as Chrome trace-event JSON: the file Perfetto and ``chrome://tracing`` open.

:meth:`Trace.save_timeline <mirrortutor.record.trace.Trace.save_timeline>` writes the phases of
:mod:`.timeline` in the format of Google's "Trace Event Format" document (the one Horovod's
timeline, ``HOROVOD_TIMELINE``, and TensorFlow's profiler write), so a recorded run can be read in
the tools a practitioner already uses, outside the notebook. What the file holds:

- the **JSON object format**: ``{"traceEvents": [...], "displayTimeUnit": "ms",
  "otherData": {...}}``;
- one **process** per worker (``pid`` = worker number; a single trace is worker 0), named by
  metadata events (``"ph": "M"``, ``"name": "process_name"``) after the TensorFlow task its
  devices belong to, e.g. ``/job:localhost/replica:0/task:0``;
- one **thread** (track) per replica (``tid`` = ``replica_id_in_sync_group``), named
  ``"replica r (GPU:0)"`` (its device within the task) by ``thread_name`` metadata, ordered by
  ``thread_sort_index``;
- one **complete event** (``"ph": "X"``) per phase: ``name`` its kind ("input", "compute",
  "waiting for replicas", "all-reduce", "outside run"), ``ts`` and ``dur`` in microseconds since
  the first recorded step's launch, ``args`` the step, replica and device.

A replica's phases tile its time without overlapping (see :mod:`.timeline`), so each track reads
left to right like the Gantt chart of ``mt.plots.step_timeline``. Only numpy and json here.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from ..errors import OutputPathError
from .timeline import Timeline

__all__ = ["events", "document", "write"]


def _process(devices: list[str]) -> str:
    """The TensorFlow task of ``devices``: their names up to ``/device:``."""
    tasks = sorted({d.split("/device:")[0] for d in devices})
    return ", ".join(tasks) if tasks != [""] else "host"


def _short(device: str) -> str:
    """The device within its task: ``GPU:0`` of ``/job:localhost/replica:0/task:0/device:GPU:0``."""
    return device.split("/device:")[-1]


def events(timelines: list[Timeline]) -> list[dict]:
    """The trace events of ``timelines``, one per worker (worker ``w`` is process ``w``).

    Replica numbers follow TensorFlow: worker ``w``'s local replica ``r`` is replica
    ``w × replicas_per_worker + r``. Times count from the earliest first launch of all workers
    (their ``tf.timestamp()`` clocks are the Unix epoch's, so one machine's workers line up).
    """
    origin = min(t.origin for t in timelines)
    out: list[dict] = []
    first = 0  # the replica number of this worker's local replica 0
    for w, tl in enumerate(timelines):
        meta = {"ph": "M", "pid": w, "tid": first}
        out.append({**meta, "name": "process_name",
                    "args": {"name": f"worker {w}: {_process(tl.devices)}"}})
        out.append({**meta, "name": "process_sort_index", "args": {"sort_index": w}})
        for r, device in enumerate(tl.devices):
            thread = {"ph": "M", "pid": w, "tid": first + r}
            out.append({**thread, "name": "thread_name",
                        "args": {"name": f"replica {first + r} ({_short(device)})"}})
            out.append({**thread, "name": "thread_sort_index", "args": {"sort_index": first + r}})
        shift = tl.origin - origin
        for p in tl.phases:
            start = (p.start + shift) * 1e6
            out.append({"ph": "X", "name": p.kind, "cat": "mirrortutor", "pid": w,
                        "tid": first + p.replica, "ts": start,
                        "dur": (p.end + shift) * 1e6 - start,
                        "args": {"step": p.step, "replica": first + p.replica,
                                 "device": tl.devices[p.replica]}})
        first += tl.replicas
    return out


def document(timelines: list[Timeline]) -> dict:
    """The whole JSON object: the events, and what they came from in ``otherData``."""
    version = getattr(sys.modules.get("mirrortutor"), "__version__", "?")
    return {"traceEvents": events(timelines), "displayTimeUnit": "ms",
            "otherData": {"written_by": f"mirrortutor {version}",
                          "origin_unix_seconds": min(t.origin for t in timelines),
                          "steps": sorted({s for t in timelines for s in t.steps}),
                          "workers": len(timelines)}}


def write(path, timelines: list[Timeline]) -> None:
    """Write ``timelines`` (one per worker) to ``path`` as Chrome trace-event JSON."""
    text = json.dumps(document(timelines))
    where = os.fspath(path)
    tmp = f"{where}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, where)  # a viewer never opens half a file
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise OutputPathError(
            f"Cannot write the timeline to {where!r} ({exc.strerror or exc}). Pass a path in a "
            "folder that exists and that you may write to, e.g. trace.save_timeline("
            "'timeline.json') in the notebook's folder; then open the file in "
            "https://ui.perfetto.dev or chrome://tracing.") from exc
