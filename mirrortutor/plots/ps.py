"""Pictures of parameter-server training (chapters 06, 07 and 10), drawn with plotly.

The staleness pictures read the log of a recording ``mt.ParameterServerStrategy``: its
:class:`~mirrortutor.record.ps_trace.ParameterServerTrace` (``strategy.trace``), or a list of the
trace's :class:`~mirrortutor.record.ps_trace.ScheduledRecord` (``trace.functions``, or the part of
it one run scheduled). :func:`convergence` draws loss curves the notebook records itself, each a
:class:`Curve`. Every function returns a ``plotly.graph_objects.Figure``; worker ``w`` has the same
colour as replica ``w`` in every other chart of the course.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..errors import InvalidQuantityError
from .style import colour, layout

#: Line colours for the runs compared in ``convergence`` (in the order given).
RUN_COLOURS = ["#222222", "#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A"]


class Curve(NamedTuple):
    """One training run's loss curve, one entry per update, in the order the updates were made.

    A plain tuple ``(examples_seen, losses, seconds)`` works as well:

    - ``examples_seen``: examples the weights had been trained on after each update (a
      synchronous update of 3 × 32 adds 96, an asynchronous one of 32 adds 32);
    - ``losses``: the loss of the batch each update's gradient was computed from;
    - ``seconds``: when each update was done, in seconds since the run started.
    """

    examples_seen: Sequence[float]
    losses: Sequence[float]
    seconds: Sequence[float]


def _functions(log) -> list:
    """The scheduled functions of ``log`` (a ParameterServerTrace, or a list of its records) in
    the order their versions were written."""
    functions = getattr(log, "functions", log)
    return sorted(functions, key=lambda f: f.version_written)


def _workers(functions: list, workers: int | None) -> int:
    return workers if workers is not None else max((f.worker for f in functions), default=-1) + 1


def staleness_histogram(log, workers: int | None = None) -> go.Figure:
    """How stale each worker's functions were: one bar group per staleness, one bar per worker.

    ``log``: a ``ParameterServerTrace`` or a list of its ``ScheduledRecord``. Staleness =
    ``version_written - 1 - version_read``: the other scheduled functions that finished between
    this one's start and its own update. ``workers`` (default: the highest worker index seen + 1)
    sets how many bar series there are. A dashed line marks N − 1: each worker runs one function
    at a time, so the *mean* staleness is at most N − 1 (a single function can exceed it).
    """
    functions = _functions(log)
    workers = _workers(functions, workers)
    stale = np.array([f.staleness for f in functions], dtype=int)
    who = np.array([f.worker for f in functions], dtype=int)
    bins = list(range(int(stale.max()) + 1 if len(stale) else 1))
    fig = go.Figure()
    for w in range(workers):
        s = stale[who == w]
        fig.add_bar(x=bins, y=[int(np.sum(s == b)) for b in bins],
                    name=f"worker {w} (mean {np.mean(s) if len(s) else 0:.2f})",
                    marker_color=colour(w))
    fig.add_vline(x=workers - 1, line_dash="dash", line_color="#888888",
                  annotation_text=f"N − 1 = {workers - 1}")
    fig.update_xaxes(title="staleness (functions finished by others in between)", dtick=1)
    fig.update_yaxes(title="scheduled functions")
    return layout(fig, "Staleness of each worker's updates", barmode="group")


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Running mean over ``window`` updates (shorter at the start), so curves can be read."""
    if window <= 1 or len(y) == 0:
        return y
    c = np.cumsum(np.insert(y.astype(float), 0, 0.0))
    n = np.arange(1, len(y) + 1)
    lo = np.maximum(0, n - window)
    return (c[n] - c[lo]) / (n - lo)


def _band_colour(hex_colour: str, alpha: float = 0.15) -> str:
    """``#RRGGBB`` as a translucent ``rgba(...)``, for the band behind a run's line."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _curves(label: str, value) -> list[Curve]:
    """``value`` (one curve, or a list of them: seeds) as checked Curves."""
    curves = value if isinstance(value, list) else [value]
    out = []
    for curve in curves:
        try:
            curve = Curve(*(np.asarray(part, dtype=float) for part in curve))
        except (TypeError, ValueError):
            raise InvalidQuantityError(
                f"convergence() needs each run as a Curve(examples_seen, losses, seconds) (or a "
                f"list of them, one per seed), but {label!r} is {type(curve).__name__}.") from None
        if not len(curve.losses) == len(curve.examples_seen) == len(curve.seconds) > 0:
            raise InvalidQuantityError(
                f"{label!r}: examples_seen, losses and seconds need one entry per update each, "
                f"but have {len(curve.examples_seen)}, {len(curve.losses)}, {len(curve.seconds)}.")
        out.append(curve)
    return out


def convergence(runs: dict, window: int = 320) -> go.Figure:
    """Training loss of several runs against examples seen (left) and seconds (right).

    ``runs`` maps a label to a :class:`Curve` (or a plain ``(examples_seen, losses, seconds)``
    tuple), or to a list of them: one set-up run with different seeds. Its line is then the mean
    over the seeds, cut to the shortest run, with a band from the seeds' lowest to highest loss
    (left), drawn at the first seed's examples seen (the same for every seed of a set-up). The
    loss of each update is smoothed over about ``window`` examples, so runs whose updates use
    different numbers of examples (a synchronous update of N × 32, an asynchronous one of 32) are
    compared at equal examples. Seconds (for seeds: their mean) are what the notebook measured,
    on logical CPU devices and processes sharing this machine's cores: not GPU speed.
    """
    if not runs:
        raise InvalidQuantityError(
            "convergence() needs at least one run: {label: Curve(examples_seen, losses, seconds)}.")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("per example seen",
                                                        "per second (measured here)"))
    for i, (label, value) in enumerate(runs.items()):
        curves = _curves(label, value)
        n = min(len(c.losses) for c in curves)
        seen = curves[0].examples_seen[:n]
        per_update = seen[-1] / n
        smooth = max(1, round(window / per_update)) if per_update > 0 else 1
        loss = np.array([_smooth(c.losses, smooth)[:n] for c in curves])  # (seeds, updates)
        seconds = np.mean([c.seconds[:n] for c in curves], axis=0)
        run_colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        name = f"{label} ({len(curves)} runs)" if len(curves) > 1 else label
        if len(curves) > 1:
            fig.add_scatter(x=np.concatenate([seen, seen[::-1]]),
                            y=np.concatenate([loss.max(0), loss.min(0)[::-1]]), fill="toself",
                            fillcolor=_band_colour(run_colour), line_width=0, hoverinfo="skip",
                            legendgroup=label, showlegend=False, row=1, col=1)
        fig.add_scatter(x=seen, y=loss.mean(0), name=name, mode="lines", line_color=run_colour,
                        legendgroup=label, row=1, col=1)
        fig.add_scatter(x=seconds, y=loss.mean(0), name=name, mode="lines", line_color=run_colour,
                        legendgroup=label, showlegend=False, row=1, col=2)
    fig.update_xaxes(title="examples seen", row=1, col=1)
    fig.update_xaxes(title="seconds (logical CPU devices sharing the cores)", row=1, col=2)
    for col in (1, 2):
        fig.update_yaxes(title=f"training loss (over ~{window} examples)", row=1, col=col)
    return layout(fig, "Convergence at equal examples, and in time", height=420)


def timeline(log, first: int = 0, count: int = 60, workers: int | None = None) -> go.Figure:
    """Each scheduled function as a bar from its start to its update, one row per worker.

    ``log``: a ``ParameterServerTrace`` or a list of its ``ScheduledRecord``. A bar runs from the
    worker's ``started`` (before it read the version) to its ``ended`` (after its increment), in
    seconds since the first function of ``log`` started; a long bar comes back stale. Shows
    functions ``first`` to ``first + count`` in the order their versions were written; hover for
    the staleness.
    """
    functions = _functions(log)
    workers = _workers(functions, workers)
    t0 = min((f.started for f in functions), default=0.0)
    shown = functions[first:first + count]
    fig = go.Figure()
    for w in range(workers):
        mine = [f for f in shown if f.worker == w]
        fig.add_bar(
            base=[f.started - t0 for f in mine], x=[f.ended - f.started for f in mine],
            y=[f"worker {w}"] * len(mine), orientation="h", name=f"worker {w}",
            marker_color=colour(w), marker_line_color="white", marker_line_width=1,
            customdata=[[f.version_written, f.staleness] for f in mine],
            hovertemplate="version %{customdata[0]}: staleness %{customdata[1]}<extra></extra>")
    fig.update_xaxes(title="seconds since the first function started (start → update)")
    return layout(fig, "Gradients in flight", barmode="overlay", height=300)


__all__ = ["Curve", "RUN_COLOURS", "convergence", "staleness_histogram", "timeline"]
