"""Pictures for chapter 05: runs of the chapter's own training program, compared.

Every chart takes plain dicts, one per run, in the order they ran, which the notebook builds from
its program's variables (an empty list gives the empty chart the ``ScalingLab`` panel starts
with). The keys each chart reads:

- :func:`loss_chart`: ``label``, ``loss`` and ``test_accuracy`` (one per epoch), ``global_batch``,
  ``steps_per_epoch``;
- :func:`time_chart`: ``label``, ``step_s`` and the parts of a step each timed alone,
  ``compute_s``, ``allreduce_s``, ``input_s`` (seconds);
- :func:`scaling_chart`: ``replicas``, ``global_batch``, ``step_s`` (measured), ``parameters``
  and ``per_replica_batch`` (for the modelled GPU line).

Times and throughputs measured here carry :func:`~mirrortutor.timing.measured_here`: on logical
CPU devices the replicas share this machine's cores, so the numbers compare TensorFlow's code
paths, never GPU speed (a run's optional ``device_kind``, "GPU" or "logical CPU", says which).
The modelled line says what it assumes.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..collectives import costmodel
from ..collectives.compute import gpu
from .style import TEMPLATE, colour, layout, measured_here, wrap

Run = Mapping[str, object]

#: The bars of ``time_chart``, side by side (never stacked: parts timed alone overlap in a step
#: and each carries its own call's fixed cost, so they do not add up to it): (label, colour, key).
STEP_PARTS = (("whole fit step", "#444444", "step_s"),
              ("compute, timed alone", "#636EFA", "compute_s"),
              ("all-reduce, timed alone", "#EF553B", "allreduce_s"),
              ("input, timed alone", "#00CC96", "input_s"))

#: Characters per line of a chart's small print: 550 px less the margins, at the footnote's size.
NOTE_CHARS = 80
#: Both charts' legend: one row over the plot, so the plot keeps the chart's width.
LEGEND = dict(orientation="h", x=0, y=1.02, yanchor="bottom")


def _note(*parts: str) -> str:
    """The small print under a chart, each part on its own lines, wrapped for the 550 px these
    charts are drawn at: :func:`~.style.layout` puts it under the x-axis and makes room for it."""
    return "<br>".join(wrap(part, NOTE_CHARS) for part in parts)


def _kind(runs: Sequence[Run]) -> str:
    return str(runs[-1].get("device_kind", "logical CPU")) if runs else "logical CPU"


def loss_chart(runs: Sequence[Run]) -> go.Figure:
    """Training loss by epoch and by examples seen, and test accuracy: one line per run.

    Loss against *examples seen* is the fair comparison between global batch sizes: a run with
    twice the global batch takes half the steps per epoch.
    """
    fig = make_subplots(rows=1, cols=3, subplot_titles=(
        "training loss by epoch", "training loss by examples seen", "test accuracy by epoch"))
    for i, run in enumerate(runs):
        epochs = list(range(1, len(run["loss"]) + 1))
        seen = [e * run["steps_per_epoch"] * run["global_batch"] for e in epochs]
        for col, x in ((1, epochs), (2, seen)):
            fig.add_trace(go.Scatter(x=x, y=list(run["loss"]), mode="lines+markers",
                                     name=run["label"], legendgroup=run["label"],
                                     showlegend=col == 1, line=dict(color=colour(i))),
                          row=1, col=col)
        fig.add_trace(go.Scatter(x=epochs, y=list(run["test_accuracy"]), mode="lines+markers",
                                 name=run["label"], legendgroup=run["label"], showlegend=False,
                                 line=dict(color=colour(i), dash="dot")), row=1, col=3)
    for col, title in ((1, "epoch"), (2, "examples seen"), (3, "epoch")):
        fig.update_xaxes(title_text=title, row=1, col=col)
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_yaxes(title_text="loss", row=1, col=2)
    fig.update_yaxes(title_text="accuracy", row=1, col=3)
    fig.update_layout(height=340, width=1100, template=TEMPLATE, margin=dict(t=50, b=40),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def time_chart(rows: Sequence[Run]) -> go.Figure:
    """A whole ``fit`` step beside its parts, each timed alone, per run: grouped bars in ms.

    Nothing is drawn as "what the step waited for" or "the rest": the input bar is producing one
    batch alone, though with ``prefetch`` a thread of tf.data produces it while the replicas work
    (on the same cores here), and how much of it a step waited for is not measured.
    """
    fig = go.Figure()
    labels = [row["label"] for row in rows]
    for part, part_colour, key in STEP_PARTS:
        fig.add_trace(go.Bar(name=part, x=labels, y=[1e3 * row[key] for row in rows],
                             marker_color=part_colour))
    # a label's ", " parts on lines of their own: upright ticks, so the note below clears them
    ticks = [str(label).replace(", ", "<br>") for label in labels]
    fig.update_xaxes(tickvals=labels, ticktext=ticks, tickangle=0)
    return layout(fig, "A step and its parts, each timed alone", _note(measured_here(_kind(rows))),
                  height=400, bottom=60, top=110, width=550, barmode="group", legend=LEGEND,
                  yaxis=dict(title="milliseconds"))


def modelled_throughput(run: Run, interconnect: str = "nvlink3-a100",
                        gpu_name: str = "a100-fp32") -> float:
    """Examples per second the cost model gives for ``run``'s model and batch on GPUs: each GPU's
    compute from the ``gpu_name`` model, then the α–β all-reduce over ``interconnect``."""
    compute_s = gpu(gpu_name).step_seconds(run["parameters"], run["per_replica_batch"])
    est = costmodel.estimate_step(run["parameters"], compute_s, run["replicas"], interconnect)
    return run["per_replica_batch"] * run["replicas"] / est.step_s


def scaling_chart(runs: Sequence[Run], interconnect: str = "nvlink3-a100",
                  gpu_name: str = "a100-fp32") -> go.Figure:
    """Throughput by replica count: measured here, and modelled for GPUs on ``interconnect``.

    The modelled line assumes each GPU computes its shard in the time the ``gpu_name`` model gives
    (:mod:`mirrortutor.collectives.compute`: FLOPs at a share of a datasheet peak plus an assumed
    overhead per step, which is nearly all of it for a small model), then waits for the alpha-beta
    all-reduce, with no overlap.
    """
    runs = sorted(runs, key=lambda r: r["replicas"])
    x = [r["replicas"] for r in runs]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[r["global_batch"] / r["step_s"] for r in runs],
                             mode="markers+lines", name="measured here"))
    fig.add_trace(go.Scatter(x=x, y=[modelled_throughput(r, interconnect, gpu_name) for r in runs],
                             mode="markers+lines", line=dict(dash="dash"),
                             name=f"modelled: GPUs over {interconnect}"))
    overhead = gpu(gpu_name).overhead_s * 1e6
    note = _note(measured_here(_kind(runs)),
                 f"modelled: each GPU computes its shard in the time the {gpu_name} model gives "
                 f"(an assumed {overhead:.0f} µs per step plus its FLOPs), then the α–β "
                 f"all-reduce over {interconnect} (no overlap)")
    return layout(fig, "Throughput (examples/s) by replicas", note, height=400, top=90, bottom=60,
                  width=550, legend=LEGEND, yaxis=dict(type="log", title="examples / s"),
                  xaxis=dict(title="replicas", dtick=1))


__all__ = ["STEP_PARTS", "loss_chart", "modelled_throughput", "scaling_chart", "time_chart"]
