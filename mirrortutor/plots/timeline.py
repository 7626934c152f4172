"""A step timeline as a Gantt chart (in the style of Horovod's timeline): chapter 09.

One row per replica, one bar per phase of each step, coloured by what the replica was doing:
waiting for its input, computing, waiting for the other replicas, all-reducing, or outside
``strategy.run``. Every bar is the gap between two ``tf.timestamp()`` values the strategy recorded
(``mt.Recording(timeline=True)``; :mod:`mirrortutor.record.timeline` says which). Nothing here
imports TensorFlow: a saved trace can be drawn anywhere.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..record.timeline import KINDS, Timeline
from ..timing import measured_here
from .style import layout, wrap

#: One colour per phase, the same in every timeline.
PHASE_COLOURS = {"input": "#FFA15A", "compute": "#636EFA", "waiting for replicas": "#EF553B",
                 "all-reduce": "#00CC96", "outside run": "#C8C8C8"}

GPU_CAVEAT = ("On a GPU replica tf.timestamp() (a CPU-only op) reads the host's clock, and when it "
              "fires relative to the GPU's work depends on how TensorFlow carries the dependency "
              "from the GPU to the host (not measured here): for a GPU's kernel and NCCL times, "
              "use the profiler (TensorBoard's trace viewer).")


def caption(timeline: Timeline) -> str:
    """What the chart measures, where, and what it cannot show (its footnote)."""
    kind = "GPU" if any("GPU" in d.upper() for d in timeline.devices) else "CPU"
    return (f"Each bar is the gap between two tf.timestamp() values the strategy recorded, "
            f"{measured_here(kind)}. " + ("" if kind == "GPU" else GPU_CAVEAT))


def step_timeline(trace, steps: list[int] | None = None, title: str = "Step timeline") -> go.Figure:
    """The phases of each replica in the recorded steps (``trace``: a Trace or a Timeline).

    ``steps`` picks some of the recorded steps (default: all). Times are milliseconds since the
    first shown step began; a dotted line marks where each step was launched.
    """
    timeline = trace if isinstance(trace, Timeline) else trace.timeline()
    shown = set(timeline.steps if steps is None else steps)
    phases = [p for p in timeline.phases if p.step in shown]
    origin = min((p.start for p in phases), default=0.0)
    rows = [f"replica {r}" for r in range(timeline.replicas)]
    fig = go.Figure()
    for kind in KINDS:
        mine = [p for p in phases if p.kind == kind]
        fig.add_bar(base=[(p.start - origin) * 1e3 for p in mine],
                    x=[p.seconds * 1e3 for p in mine], y=[rows[p.replica] for p in mine],
                    orientation="h", name=kind, marker_color=PHASE_COLOURS[kind],
                    marker_line_width=0, customdata=[[p.step] for p in mine],
                    hovertemplate="step %{customdata[0]}: " + kind + " %{x:.2f} ms<extra></extra>")
    for step, (launch, _) in timeline.spans.items():
        if step in shown:
            fig.add_vline(x=(launch - origin) * 1e3, line_dash="dot", line_color="#888888",
                          annotation_text=f"step {step}", annotation_position="top left")
    fig.update_yaxes(categoryorder="array", categoryarray=rows[::-1])
    fig.update_xaxes(title="milliseconds since the first step shown began")
    # at least 4 rows' height: the legend's five phases need it, or a still image cuts them off
    height = 120 + 40 * max(timeline.replicas, 4)
    return layout(fig, title, wrap(caption(timeline)), barmode="overlay", height=height,
                  legend_title="phase")


__all__ = ["GPU_CAVEAT", "PHASE_COLOURS", "caption", "step_timeline"]
