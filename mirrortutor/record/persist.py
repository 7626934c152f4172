"""A trace on disk: one file a later mirrortutor (or plain numpy and json) can still read.

A teacher records a run on a GPU machine, saves it, and hands the file to a class of laptops;
two runs can be compared next term. So the file is a documented format, not a pickle of the
classes of the day (which a renamed attribute would break, and which runs code when loaded).

**Format, version 1.** One NumPy ``.npz`` archive (a zip of ``.npy`` files; ``numpy.load(path)``
opens it, no pickle involved) holding

- ``format.json``: a 0-d unicode array of JSON text,
  ``{"format": "mirrortutor-trace", "version": 1, "written_by": "mirrortutor 0.1.0",
  "content": VALUE}``;
- ``a0``, ``a1``, …: every array of the records, exactly as recorded (dtype, shape, bits).

A VALUE is JSON (``null``, booleans, numbers, strings, lists, objects with string keys; floats
are written exactly, non-finite ones as ``NaN`` / ``Infinity``) or one of these tagged objects:

- ``{"$array": "a7"}``: the archive's array ``a7`` (``"dtype": "bfloat16"`` added when numpy
  cannot name the dtype itself: the array is then stored as its bits, ``uint16``);
- ``{"$tuple": [...]}``; ``{"$map": [[key, value], ...]}`` (a dict whose keys are not plain
  strings);
- ``{"$record": "ShardRecord", "fields": {...}}``: one record of :mod:`.records` by class name
  (``Recording``, ``VariableRecord``, ``ShardRecord``, ``AllReduceRecord``, ``OutputRecord``,
  ``SyncRecord``, ``SkippedRecord``, ``StepRecords``, ``TimelineRecord``, ``ReductionStamps``, …),
  its fields by name;
- ``{"$trace": {...}}``: a :class:`~mirrortutor.record.trace.Trace`, the fields of
  :meth:`~mirrortutor.record.trace.Trace.state`; ``"class": "ParameterServerTrace"`` beside it
  for a :class:`~mirrortutor.record.ps_trace.ParameterServerTrace` (its records:
  ``PlacementRecord``, ``ScheduledRecord``, ``FailedRecord``).

Reading is lenient where it can be: a record's unknown fields are ignored and missing ones take
their defaults, so a version that adds fields still reads version 1. A file of a newer version
raises :class:`~mirrortutor.errors.TraceFileError` saying to upgrade. Multi-worker results and
runs use the same format under their own names (``mirrortutor-worker-result``,
``mirrortutor-multiworker-run``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np

from ..errors import TraceFileError
from . import records
from .ps_trace import PS_RECORDS, ParameterServerTrace
from .trace import Trace

VERSION = 1  # the format version this module writes; it reads every version up to it
RECORDS = {cls.__name__: cls for cls in (
    records.Recording, records.VariableRecord, records.VariableSnapshot, records.ShardRecord,
    records.AllReduceRecord, records.OutputRecord, records.SyncRecord, records.SkippedRecord,
    records.StepRecords, records.GradientRecord, records.TimelineRecord,
    records.ReductionStamps, *PS_RECORDS)}
TRACES = {cls.__name__: cls for cls in (Trace, ParameterServerTrace)}


def _encode(value, arrays: dict):
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        if value.dtype == object:
            raise TraceFileError(f"cannot save an array of Python objects ({value!r:.80}); "
                                 "a trace holds numbers only.")
        if value.dtype.kind == "V":  # a dtype numpy cannot name in a .npy header (bfloat16)
            arrays[key] = value.view(f"u{value.dtype.itemsize}")  # e.g. bfloat16: keep its bits
            return {"$array": key, "dtype": str(value.dtype)}
        arrays[key] = value
        return {"$array": key}
    if isinstance(value, Trace):
        kind = {} if type(value) is Trace else {"class": type(value).__name__}
        return {"$trace": {k: _encode(v, arrays) for k, v in value.state().items()}, **kind}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"$record": type(value).__name__,
                "fields": {f.name: _encode(getattr(value, f.name), arrays)
                           for f in dataclasses.fields(value)}}
    if isinstance(value, np.generic):  # a numpy scalar: kept as a 0-d array, dtype and all
        return _encode(np.asarray(value), arrays)
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, arrays) for v in value]}
    if isinstance(value, list):
        return [_encode(v, arrays) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _encode(v, arrays) for k, v in value.items()}
        return {"$map": [[_encode(k, arrays), _encode(v, arrays)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TraceFileError(f"cannot save a {type(value).__name__} ({value!r:.80}) in a trace file; "
                         "records hold numbers, strings, lists and numpy arrays only.")


def _decode(value, arrays, kinds: dict):
    if isinstance(value, list):
        return [_decode(v, arrays, kinds) for v in value]
    if not isinstance(value, dict):
        return value
    if "$array" in value:
        array = arrays[value["$array"]]
        return array.view(_dtype(value["dtype"])) if "dtype" in value else array
    if "$tuple" in value:
        return tuple(_decode(v, arrays, kinds) for v in value["$tuple"])
    if "$map" in value:
        return {_decode(k, arrays, kinds): _decode(v, arrays, kinds) for k, v in value["$map"]}
    if "$trace" in value:
        cls = TRACES.get(value.get("class", "Trace"))
        if cls is None:
            raise TraceFileError(f"the file holds a trace of kind {value['class']!r}, which this "
                                 "version of mirrortutor does not know; upgrade mirrortutor.")
        return cls.from_state({k: _decode(v, arrays, kinds) for k, v in value["$trace"].items()})
    if "$record" in value:
        cls = kinds.get(value["$record"])
        if cls is None:
            raise TraceFileError(f"the file holds a record of kind {value['$record']!r}, which "
                                 "this version of mirrortutor does not know; upgrade mirrortutor.")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: _decode(v, arrays, kinds) for k, v in value["fields"].items()
                      if k in known})
    return {k: _decode(v, arrays, kinds) for k, v in value.items()}


def _dtype(name: str):
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # bfloat16 and friends: installed with TensorFlow

        return np.dtype(getattr(ml_dtypes, name))


def write(path, name: str, content) -> None:
    """Write ``content`` (records, traces, plain values) to ``path`` as format ``name``."""
    arrays: dict[str, np.ndarray] = {}
    version = getattr(sys.modules.get("mirrortutor"), "__version__", "?")
    header = {"format": f"mirrortutor-{name}", "version": VERSION,
              "written_by": f"mirrortutor {version}", "content": _encode(content, arrays)}
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:  # a file object: numpy adds no ".npz" to the name
        np.savez_compressed(f, **{"format.json": np.array(json.dumps(header))}, **arrays)
    os.replace(tmp, path)  # a reader never sees half a file


def read(path, name: str, kinds: dict | None = None):
    """Read what :func:`write` wrote as format ``name``; ``kinds``: extra record classes."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            header = json.loads(str(archive["format.json"]))
            arrays = {k: archive[k] for k in archive.files if k != "format.json"}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise TraceFileError(f"{os.fspath(path)!r} is not a mirrortutor file ({exc}); write one "
                             "with trace.save(path).") from exc
    if header.get("format") != f"mirrortutor-{name}":
        raise TraceFileError(f"{os.fspath(path)!r} holds {header.get('format')!r}, not "
                             f"'mirrortutor-{name}'.")
    if int(header.get("version", 0)) > VERSION:
        raise TraceFileError(
            f"{os.fspath(path)!r} was written in format version {header['version']} "
            f"({header.get('written_by')}); this mirrortutor reads versions up to {VERSION}. "
            "Upgrade mirrortutor to read it.")
    return _decode(header["content"], arrays, {**RECORDS, **(kinds or {})})


def save_trace(trace: Trace, path) -> None:
    """``trace.save(path)``: the trace, as format ``mirrortutor-trace``."""
    write(path, "trace", trace)


def load_trace(path) -> Trace:
    """``mt.Trace.load(path)``: a trace written by :func:`save_trace`."""
    return read(path, "trace")
