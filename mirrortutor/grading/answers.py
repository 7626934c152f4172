"""What a check hands the grader: the answer as plain data, never a verdict.

``mt.check`` judges an answer in two halves. In the student's kernel an answer's **kind** turns it
into JSON data (:meth:`Value.export`, :meth:`Function.export`, or a question's own export); then
the question's judge reads only that data. The student sees the verdict at once. When the grader runs the notebook:

- :data:`ANSWERS_VARIABLE` names a file; every check appends ``{"question": id, "data": ...}`` to
  it. The grader's cell-log plugin reads what each cell appended, so each record belongs to the
  cell that wrote it, and the grader judges the check cells' records **in its own process** with
  the same judges. What the kernel printed decides nothing;
- the key's hidden inputs for a function answer reach the kernel only with the check that calls
  the function on them: the graded copy of that check cell starts with :func:`hand_over`, and
  :func:`hidden_cases` takes them back out at once. No file or variable holds them before.

Nothing the kernel writes is trusted as a verdict: a redefined ``mt.check`` writes no record, a
patched judge changes only what the kernel prints, and a forged record is just another answer,
judged like a real one. The data is JSON (no pickle), so judging it runs no student code.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

__all__ = ["ANSWERS_VARIABLE", "NO_ANSWER", "Calls", "Function", "Value", "dataset_data",
           "hand_over", "hidden_cases", "hidden_prefix", "normalised", "send", "to_data"]

ANSWERS_VARIABLE = "MIRRORTUTOR_ANSWERS"  # the file each check appends its answer data to
NO_ANSWER = {"mirrortutor": "no answer"}  # the data of a `...` left in place
MAX_ITEMS = 100_000  # an array larger than this is described, not sent
MAX_RECORD = 1_000_000  # characters of one record; a larger answer is sent as too large
MAX_ELEMENTS = 1_000  # elements of a tf.data.Dataset handed over (the rest are not read)


def to_data(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data: numbers, strings, lists (tuples and arrays too), dicts by string.

    Tensors and numpy values become lists and floats; a ``tf.data.Dataset`` its elements
    (:func:`dataset_data`); a dataclass (``mt.costmodel.StepEstimate``)
    a dict of its fields plus ``"type"``; a distributed variable its ``type``, ``aggregation`` and
    per-device ``copies``. Anything else becomes a short description, ``"<TypeName>"``, which no
    judge accepts as an answer.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 20:
        return "<nested too deep>"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__, **{f.name: to_data(getattr(value, f.name), depth + 1)
                                                 for f in dataclasses.fields(value)}}
    if hasattr(value, "element_spec") and hasattr(value, "as_numpy_iterator"):  # a tf.data.Dataset
        return dataset_data(value, depth)
    if hasattr(value, "aggregation") and isinstance(getattr(value, "values", None), (list, tuple)):
        aggregation = getattr(value.aggregation, "name", str(value.aggregation))
        return {"type": type(value).__name__, "aggregation": aggregation,
                "copies": [to_data(c, depth + 1) for c in value.values]}
    if hasattr(value, "numpy") and callable(value.numpy):  # a tensor: its value
        try:
            value = value.numpy()
        except Exception:
            return f"<{type(value).__name__}>"
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays and scalars
        if getattr(value, "size", 1) > MAX_ITEMS:
            return f"<array of shape {tuple(value.shape)}>"
        return to_data(value.tolist(), depth + 1)
    if isinstance(value, (list, tuple)):
        return [to_data(v, depth + 1) for v in value[:MAX_ITEMS]]
    if isinstance(value, dict):
        return {str(k): to_data(v, depth + 1) for k, v in list(value.items())[:1000]}
    if callable(value):
        return f"<function {getattr(value, '__name__', type(value).__name__)}>"
    return f"<{type(value).__name__}>"


def dataset_data(dataset: Any, depth: int = 0) -> dict:
    """A ``tf.data.Dataset`` as ``{"type": "Dataset", "elements": [...], "complete": bool}``: its
    first :data:`MAX_ELEMENTS` elements, each as data, and whether that was all of them (a
    ``.repeat()``-ed dataset never ends). An element that fails to compute is the answer's error."""
    elements, complete = [], True
    for element in dataset.as_numpy_iterator():
        if len(elements) == MAX_ELEMENTS:
            complete = False
            break
        elements.append(to_data(element, depth + 1))
    return {"type": "Dataset", "elements": elements, "complete": complete}


def normalised(data: Any) -> Any:
    """Data as the grader will read it back (a JSON round trip), so both judge the same thing."""
    text = json.dumps(data)
    return json.loads(text) if len(text) <= MAX_RECORD else "<answer too large to hand in>"


@dataclass(frozen=True)
class Value:
    """An answer that is a value (a number, a list, a pair): handed over as it is."""

    def export(self, answer: Any, hidden: list) -> Any:
        return to_data(answer)

    def prepare(self, data: Any, hidden: list) -> Any:
        return data


@dataclass(frozen=True)
class Function:
    """An answer that is a function: called in the kernel on every case, public and hidden.

    A case is a JSON list (what the key's metadata can hold); ``build`` turns it into the call's
    arguments (arrays, say), and the judge reads the results through :class:`Calls`.
    """

    name: str  # what the exercise calls the function, e.g. "split_sizes"
    cases: tuple  # the public cases (JSON lists), in the order the judge tries them
    build: Callable[..., tuple] = lambda *case: tuple(case)  # case -> the call's arguments

    def export(self, fn: Any, hidden: list) -> dict:
        calls = []
        if callable(fn):
            for case in [*self.cases, *hidden]:
                try:
                    calls.append({"case": list(case), "result": to_data(fn(*copy.deepcopy(
                        self.build(*case))))})
                except Exception as exc:  # the student's code: any error is part of the answer
                    calls.append({"case": list(case), "error": f"{type(exc).__name__}: {exc}"})
        try:
            source = inspect.getsource(fn)[:20_000]
        except (TypeError, OSError):
            source = ""
        return {"callable": callable(fn), "given": to_data(fn) if not callable(fn) else "",
                "source": source, "calls": calls}

    def prepare(self, data: Any, hidden: list) -> "Calls":
        return Calls(self.name, data, [list(c) for c in (*self.cases, *hidden)])


class Calls:
    """A function answer's results, read back case by case; what a function question judges."""

    def __init__(self, name: str, data: Any, cases: list[list]):
        self.name, self.cases = name, cases
        data = data if isinstance(data, dict) else {"given": data}
        self.source = data.get("source") if isinstance(data.get("source"), str) else ""
        self._calls = [c for c in data.get("calls", []) if isinstance(c, dict)] \
            if isinstance(data.get("calls"), list) else []
        self._data = data

    def shown(self, case: list) -> str:
        return f"{self.name}({', '.join(str(a) for a in case)})"

    def __iter__(self) -> Iterator[tuple[list, Any]]:
        """``(case, result)`` for every case, public then hidden; a failed or missing call raises
        :class:`~mirrortutor.grading.checks.Wrong` with what to fix."""
        from .checks import Wrong, short

        if not self._data.get("callable"):
            raise Wrong(f"expected your function {self.name}, but got "
                        f"{short(self._data.get('given', self._data))}; pass the function itself.")
        if re.search(r"mirrortutor|\bmt\.", self.source):
            raise Wrong(f"your {self.name} calls mirrortutor; write the rule yourself, with numpy "
                        "and plain Python.")
        for case in self.cases:
            call = next((c for c in self._calls if c.get("case") == case), None)
            if call is None:
                raise Wrong(f"{self.shown(case)} was never called: the check did not run your "
                            "function on every input. Run the check cell as it is.")
            if "error" in call:
                raise Wrong(f"calling {self.shown(case)} raised {call['error']}".rstrip(": ")
                            + ". Fix the function and run its cell again.")
            yield case, call.get("result")


_handed: dict[str, list] = {}  # hidden cases handed over for the check about to run


def hand_over(cases: dict[str, list]) -> None:
    """Called by the grader's copy of a check cell, first thing: that question's hidden cases."""
    _handed.clear()
    _handed.update(cases)


def hidden_prefix(question: str, cases: list) -> str:
    """The line the grader puts on top of ``question``'s check cell to hand over its cases."""
    handed = {question: [list(c) for c in cases]}
    return (f'__import__("mirrortutor.grading.answers").grading.answers.hand_over({handed!r})'
            "  # the key's hidden inputs, for this check only\n")


def hidden_cases(question: str) -> list:
    """The hidden cases handed over for ``question`` by the check cell running now, else []; the
    hand-over is emptied, so no later cell finds them."""
    cases = _handed.pop(question, [])
    _handed.clear()
    return [list(c) for c in cases if isinstance(c, list)]


def send(question: str, data: Any) -> None:
    """Append the answer's data to the grader's file, when the grader is running the notebook."""
    path = os.environ.get(ANSWERS_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"question": question, "data": data}) + "\n")
