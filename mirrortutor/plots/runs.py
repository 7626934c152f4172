"""Training runs compared by their losses (chapter 10), drawn with plotly from plain numbers.

:func:`loss_curves` takes what any training loop can hand over, with no trace type: per run, the
examples seen after each update and the loss of that update's batch. Runs whose updates take
different numbers of examples (a synchronous update of N × 32, an asynchronous one of 32) are
drawn against examples seen, so they meet at equal examples.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..errors import InvalidQuantityError
from .style import layout

__all__ = ["loss_curves"]

#: Line colours, in the order the runs are given: Okabe and Ito's palette (black, blue,
#: vermillion, bluish green, …), told apart with any colour vision and in a 256-colour PNG.
COLOURS = ["#222222", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]


def _smooth(values: np.ndarray, n: int) -> np.ndarray:
    """Running mean over the last ``n`` values (fewer at the start)."""
    sums = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - n, 0)
    return (sums[idx] - sums[lo]) / (idx - lo)


def loss_curves(runs: dict, window: int = 320) -> go.Figure:
    """Training loss against examples seen: one line per label, the mean over its seeds, with a
    band from the lowest to the highest seed.

    ``runs`` maps a label to a list of ``(examples, losses)`` pairs, one per seed: ``examples[i]``
    the examples seen after update ``i``, ``losses[i]`` the loss of that update's batch. Each loss
    is smoothed over about ``window`` examples; seeds are cut to the shortest.
    """
    if not runs or any(not seeds for seeds in runs.values()):
        raise InvalidQuantityError(
            "loss_curves() needs {label: [(examples, losses), ...]} with at least one run per "
            "label, e.g. {'one device': [(np.arange(1, 85) * 32, losses)]}.")
    fig = go.Figure()
    for i, (label, seeds) in enumerate(runs.items()):
        n = min(len(losses) for _, losses in seeds)
        seen = np.asarray(seeds[0][0], dtype=float)[:n]
        if n < 1 or any(len(examples) < n for examples, _ in seeds):
            raise InvalidQuantityError(
                f"loss_curves(): run {label!r} needs as many examples-seen values as losses.")
        per_update = seen[-1] / n
        loss = np.array([_smooth(np.asarray(l, dtype=float)[:n], max(1, round(window / per_update)))
                         for _, l in seeds])
        colour = COLOURS[i % len(COLOURS)]
        name = f"{label} ({len(seeds)} seeds)" if len(seeds) > 1 else label
        if len(seeds) > 1:
            fig.add_scatter(x=np.concatenate([seen, seen[::-1]]),
                            y=np.concatenate([loss.max(0), loss.min(0)[::-1]]), fill="toself",
                            fillcolor=colour, opacity=0.15, line_width=0, hoverinfo="skip",
                            legendgroup=label, showlegend=False)
        fig.add_scatter(x=seen, y=loss.mean(0), name=name, mode="lines", line_color=colour,
                        legendgroup=label)
    fig.update_xaxes(title="examples seen")
    fig.update_yaxes(title=f"training loss (over ~{window} examples)")
    # The legend under the plot, one label a row: long labels keep the plot its full width.
    rows = len(runs)
    return layout(fig, "Convergence at equal examples", height=420 + 22 * rows,
                  bottom=60 + 22 * rows,
                  legend=dict(orientation="v", x=0, xanchor="left", y=-0.14, yanchor="top"))
