"""trace.save_timeline: the step timeline as Chrome trace-event JSON (Perfetto, chrome://tracing).

The file is checked twice: against a JSON Schema of the trace-event format (Google's "Trace Event
Format" document: the JSON object format, complete events "X", metadata events "M"), and for what
it must say: one track per replica, every recorded step's phases, spans that never overlap on a
track, and durations equal to the Timeline's own phases.
"""

from __future__ import annotations

import json
from collections import defaultdict

import jsonschema
import pytest

import mirrortutor as mt
from helpers import digits, mlp_step
from mirrortutor.errors import NotRecordedError, OutputPathError
from mirrortutor.record import chrome_trace

GLOBAL = 64
NS = 1e-3  # one nanosecond, in the file's microseconds: the rounding of float arithmetic

#: The trace-event format's JSON object form, as far as this file uses it.
SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "$defs": {
        "event": {
            "type": "object",
            "required": ["name", "ph", "pid", "tid"],
            "properties": {"name": {"type": "string"}, "cat": {"type": "string"},
                           "ph": {"type": "string", "minLength": 1, "maxLength": 1},
                           "pid": {"type": "integer"}, "tid": {"type": "integer"},
                           "ts": {"type": "number"}, "args": {"type": "object"}},
            "allOf": [
                {"if": {"properties": {"ph": {"const": "X"}}},
                 "then": {"required": ["ts", "dur"],
                          "properties": {"ts": {"minimum": 0}, "dur": {"type": "number",
                                                                       "minimum": 0}}}},
                {"if": {"properties": {"ph": {"const": "M"}}},
                 "then": {"required": ["args"], "properties": {
                     "name": {"enum": ["process_name", "process_labels", "process_sort_index",
                                       "thread_name", "thread_sort_index"]}}}},
                {"if": {"properties": {"name": {"enum": ["process_name", "thread_name"]},
                                       "ph": {"const": "M"}}},
                 "then": {"properties": {"args": {"required": ["name"], "properties": {
                     "name": {"type": "string"}}}}}},
                {"if": {"properties": {"name": {"enum": ["process_sort_index",
                                                         "thread_sort_index"]},
                                       "ph": {"const": "M"}}},
                 "then": {"properties": {"args": {"required": ["sort_index"], "properties": {
                     "sort_index": {"type": "integer"}}}}}},
            ],
        },
    },
}


def recorded(devices, steps: int = 4):
    """A strategy with the timeline on, after ``steps`` compiled custom steps."""
    strategy = mt.MirroredStrategy(devices, recording=mt.Recording(timeline=True))
    step = mlp_step(strategy, 32, GLOBAL, digits(256).to_tf(GLOBAL, drop_remainder=True),
                    layers=1, reduce=True)
    for _ in range(steps):
        step()
    return strategy


@pytest.fixture(scope="module")
def four(devices):
    return recorded(devices[:4])


def load(path) -> dict:
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    return document


def spans(document) -> list[dict]:
    return [e for e in document["traceEvents"] if e["ph"] == "X"]


def test_the_file_is_trace_event_json_with_a_track_per_replica(four, tmp_path):
    """Valid against the schema; one named process, one named track per replica."""
    path = tmp_path / "timeline.json"
    four.trace.save_timeline(path)
    document = load(path)
    meta = [e for e in document["traceEvents"] if e["ph"] == "M"]
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    devices = four.trace.timeline().devices
    assert threads == {r: f"replica {r} (CPU:{r})" for r in range(4)}
    assert devices == [f"/job:localhost/replica:0/task:0/device:CPU:{r}" for r in range(4)]
    processes = [e["args"]["name"] for e in meta if e["name"] == "process_name"]
    assert processes == ["worker 0: /job:localhost/replica:0/task:0"]
    assert {(e["pid"], e["tid"]) for e in spans(document)} == {(0, r) for r in range(4)}
    assert all(e["args"]["device"] == devices[e["tid"]] and e["args"]["replica"] == e["tid"]
               for e in spans(document))


def test_every_phase_is_a_span_of_the_timelines_duration(four, tmp_path):
    """Each of the Timeline's phases is one "X" event, same step, replica, kind, start and
    duration (to the nanosecond), counted from the first step's launch; nothing else is."""
    path = tmp_path / "timeline.json"
    four.trace.save_timeline(path)
    timeline = four.trace.timeline()
    events = spans(load(path))
    assert len(events) == len(timeline.phases)
    for e, p in zip(events, timeline.phases):
        assert (e["name"], e["args"]["step"], e["tid"]) == (p.kind, p.step, p.replica)
        assert e["ts"] == pytest.approx(p.start * 1e6, abs=NS)
        assert e["dur"] == pytest.approx(p.seconds * 1e6, abs=NS)
    assert min(e["ts"] for e in events) == 0.0  # the first step's launch
    assert sorted({e["args"]["step"] for e in events}) == four.trace.timed_steps() == [0, 1, 2, 3]
    for step in timeline.steps:  # every step: each replica computed and all-reduced
        for r in range(4):
            kinds = {e["name"] for e in events if e["args"]["step"] == step and e["tid"] == r}
            assert {"compute", "all-reduce"} <= kinds, (step, r, kinds)


def test_spans_never_overlap_on_a_track(four, tmp_path):
    """On each replica's track a span ends before (or as) the next begins."""
    path = tmp_path / "timeline.json"
    four.trace.save_timeline(path)
    tracks = defaultdict(list)
    for e in spans(load(path)):
        tracks[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for track in tracks.values():
        track.sort()
        assert all(end <= nxt + NS for (_, end), (nxt, _) in zip(track, track[1:]))


def test_workers_are_processes_and_replicas_numbered_as_tensorflow_does(four, devices, tmp_path):
    """Two workers' timelines in one file: worker w is process w, its replicas follow the
    previous worker's (replica_id_in_sync_group), times share the earliest launch."""
    other = recorded(devices[4:6], steps=2)
    path = tmp_path / "merged.json"
    chrome_trace.write(path, [four.trace.timeline(), other.trace.timeline()])
    document = load(path)
    events = spans(document)
    assert {(e["pid"], e["tid"]) for e in events} == {(0, 0), (0, 1), (0, 2), (0, 3), (1, 4),
                                                       (1, 5)}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in document["traceEvents"]
             if e["name"] == "thread_name"}
    assert names[1, 5] == "replica 5 (CPU:5)"
    later = other.trace.timeline().origin - four.trace.timeline().origin
    assert later > 0  # recorded after the other one
    assert min(e["ts"] for e in events if e["pid"] == 1) == pytest.approx(later * 1e6, abs=NS)
    assert document["otherData"]["workers"] == 2


def test_a_path_that_cannot_be_written_says_what_to_do(four, tmp_path):
    """A missing folder, or a path that is a folder: OutputPathError (an OSError), no file left."""
    for path in (tmp_path / "no such folder" / "timeline.json", tmp_path):
        with pytest.raises(OutputPathError, match="folder that exists") as caught:
            four.trace.save_timeline(path)
        assert isinstance(caught.value, OSError)
    assert list(tmp_path.iterdir()) == []  # not even a half-written temporary file


def test_a_trace_without_a_timeline_says_how_to_record_one(devices, tmp_path):
    """A trace recorded without timeline=True: a plain error naming mt.Recording(timeline=True)."""
    strategy = mt.MirroredStrategy(devices[:2])
    step = mlp_step(strategy, 8, GLOBAL, digits(128).to_tf(GLOBAL, drop_remainder=True), layers=1)
    step()
    with pytest.raises(NotRecordedError, match=r"mt\.Recording\(timeline=True\)"):
        strategy.trace.save_timeline(tmp_path / "timeline.json")
    assert not (tmp_path / "timeline.json").exists()
