"""Pictures of a :class:`~mirrortutor.Trace`, drawn with plotly (offline, same output every run).

Each function takes a trace (or one of its records) and returns a ``plotly.graph_objects.Figure``;
call ``.show()`` on it, or just leave it as a cell's last line. Asking for something the trace did
not record (a skipped step, a variable kept only as norms) raises
:class:`~mirrortutor.errors.NotRecordedError`, which says what was recorded instead.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..errors import NotRecordedError
from ..record.records import AllReduceRecord
from ..record.trace import Trace
from .style import REPLICA_COLOURS, colour, layout


def shard_map(trace: Trace, dataset=None, steps: list[int] | None = None) -> go.Figure:
    """Which replica received which example, step by step.

    One row per step, one mark per example (x: the example's index), coloured by the replica
    that received it. Pass the :class:`~mirrortutor.data.Dataset` when the data had no index
    column (Keras ``fit``), so examples can be recognised by their rows.
    """
    steps = steps if steps is not None else [s for s in trace.steps if trace.shards(s)]
    fig = go.Figure()
    replicas = sorted({r.replica_id for s in steps for r in trace.shards(s)})
    for r in replicas:
        xs, ys = [], []
        for s in steps:
            ids = trace.example_ids(s, dataset).get(r)
            if ids is not None:
                xs.extend(int(i) for i in ids)
                ys.extend([s] * len(ids))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=f"replica {r}",
                                 marker=dict(color=colour(r), symbol="square", size=7),
                                 hovertemplate="example %{x}<br>step %{y}<extra>replica " + str(r)
                                 + "</extra>"))
    fig.update_yaxes(title="step", autorange="reversed", dtick=1)
    fig.update_xaxes(title="example index")
    return layout(fig, "Shard map: each global batch cut into per-replica batches",
                  legend_title="received by")


def gradient_norms(trace: Trace, step: int) -> go.Figure:
    """Each replica's local gradient norm per variable, beside the norm of the all-reduced one.

    The all-reduce SUMs the local gradients (each already divided by the *global* batch size), so
    "all-reduced" is the gradient every replica applies.
    """
    grads = trace.gradients(step)
    if not grads:
        raise NotRecordedError(
            f"No gradients were recorded at step {step}. Recorded steps: {trace.steps[:10]}…; "
            "pick one of those, or record more with mt.Recording.everything()."
        )
    names = list(dict.fromkeys(g.variable for g in grads))
    replicas = sorted({g.replica_id for g in grads})
    fig = go.Figure()
    for r in replicas:
        fig.add_trace(go.Bar(name=f"replica {r} (local)", x=names, marker_color=colour(r),
                             y=[next(g.norm for g in grads if g.variable == n and g.replica_id == r)
                                for n in names]))
    fig.add_trace(go.Bar(name="all-reduced (applied)", x=names, marker_color="#222222",
                         y=[next(g.reduced_norm for g in grads if g.variable == n) for n in names]))
    fig.update_xaxes(title="variable")
    fig.update_yaxes(title="gradient norm ‖g‖")
    return layout(fig, f"Step {step}: each replica's gradient, and the all-reduced one",
                  barmode="group")


def allreduce_diagram(record: AllReduceRecord, tensor: int = 0, name: str | None = None) -> go.Figure:
    """One all-reduce drawn as flows: every replica's input → the reduction → every replica.

    Widths are the L2 norms of the values (inputs on the left, results on the right). ``name``
    titles the tensor; by default it is the destination variable's name, or "value <tensor>" for
    the anonymous tensors of a ``batch_reduce`` (Keras's gradients: name them with
    ``trace.reduced_gradients(step)``'s keys).
    """
    n_in = record.input_norms.shape[1]
    n_out = record.output_norms.shape[1]
    ins = record.input_norms[tensor]
    outs = record.output_norms[tensor]
    labels = ([f"replica {r} input<br>‖x‖ = {ins[r]:.4g}" for r in range(n_in)]
              + [f"{record.reduce_op}<br>{record.implementation}"]
              + [f"replica {r} result<br>‖y‖ = {outs[r]:.4g}" for r in range(n_out)])
    colours = ([colour(r) for r in range(n_in)] + ["#222222"] + [colour(r) for r in range(n_out)])
    mid = n_in
    fig = go.Figure(go.Sankey(
        arrangement="fixed",
        node=dict(label=labels, color=colours, pad=18, thickness=16,
                  x=[0.02] * n_in + [0.5] + [0.98] * n_out,
                  y=[(r + 0.5) / n_in for r in range(n_in)] + [0.5]
                  + [(r + 0.5) / n_out for r in range(n_out)]),
        link=dict(source=list(range(n_in)) + [mid] * n_out,
                  target=[mid] * n_in + list(range(mid + 1, mid + 1 + n_out)),
                  value=[max(float(v), 1e-12) for v in ins] + [max(float(v), 1e-12) for v in outs]),
    ))
    if name is None:
        name = record.names[tensor] if tensor < len(record.names) else f"value {tensor}"
    return layout(fig, f"All-reduce of {name} (step {record.step}): inputs → "
                  f"{record.reduce_op} → every replica", height=340)


def variable_values(trace: Trace, name: str, element: int = 0) -> go.Figure:
    """One element of a variable on every replica after each recorded step (lines overlap when
    the replicas are in sync). Needs the variable's values kept (small variables, or
    ``mt.Recording(full_values=True)``)."""
    fig = go.Figure()
    records = [r for r in trace.sync() if r.name == name and r.values is not None]
    if not records:
        raise NotRecordedError(
            f"No values of {name!r} were kept. Variables recorded: "
            f"{[v.name for v in trace.variables]}; large ones keep only their differences "
            "unless the strategy records with mt.Recording(full_values=True)."
        )
    replicas = len(records[0].values)
    for r in range(replicas):
        # Replica 0's line is the widest, each later one thinner: copies that agree stay visible
        # as nested lines instead of hiding each other.
        width = 6 - 4 * r / max(replicas, 1)
        fig.add_trace(go.Scatter(
            x=[rec.step for rec in records],
            y=[float(np.ravel(rec.values[r])[element]) for rec in records],
            mode="lines+markers", name=f"replica {r}", line=dict(color=colour(r), width=width),
        ))
    fig.update_xaxes(title="step")
    fig.update_yaxes(title=f"{name} [element {element}]")
    return layout(fig, f"{name}: every replica's copy after each step")


def bars_per_replica(values, title: str, ylabel: str) -> go.Figure:
    """A bar per replica: e.g. each replica's local loss, or what each replica returned."""
    values = [float(v) for v in np.ravel(np.asarray(values))]
    fig = go.Figure(go.Bar(x=[f"replica {r}" for r in range(len(values))], y=values,
                           marker_color=[colour(r) for r in range(len(values))],
                           text=[f"{v:.4g}" for v in values], textposition="outside"))
    fig.update_yaxes(title=ylabel)
    return layout(fig, title)


__all__ = ["REPLICA_COLOURS", "allreduce_diagram", "bars_per_replica", "gradient_norms",
           "shard_map", "variable_values"]
