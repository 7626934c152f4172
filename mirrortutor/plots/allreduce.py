"""Pictures for chapters 04 and 04b: all-reduce schedules animated, and their cost modelled or measured.

Every function returns a ``plotly.graph_objects.Figure`` (offline, the same JSON every run).
Modelled charts say which preset and source they assume; measured ones say they were measured on
logical CPU devices sharing this machine's cores, never GPU speed.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..collectives import allreduce, costmodel
from ..collectives.simulator import check_algorithm
from ..errors import NotRecordedError, UnknownAlgorithmError
from .style import colour, layout, wrap

_ALGO_COLOURS = {"reduce_to_one": "#EF553B", "ring": "#636EFA", "halving_doubling": "#00CC96"}
_ALGO_NAMES = {"reduce_to_one": "reduce to one device", "ring": "ring",
               "halving_doubling": "halving-doubling"}
_MODEL = "modelled: alpha-beta cost model (Thakur, Rabenseifner & Gropp 2005)"
# Chapter 04's frame: taller than the trace charts, and a wider left margin for log-axis labels.
_LEFT = 70


def _counts(algorithm: str, n: int):
    """Run ``algorithm`` on all-ones inputs, one element per chunk: each buffer cell then holds
    how many ranks' contributions it has summed (1..n). Returns the result and chunk count."""
    check_algorithm(algorithm)  # a misspelt name: UnknownAlgorithmError listing the known ones
    chunks = n if algorithm != "halving_doubling" else 1 << (n.bit_length() - 1)
    simulate = getattr(allreduce, algorithm)
    result = simulate([np.ones(chunks, dtype=np.int64) for _ in range(n)], record=True)
    return result, chunks


def _describe(transfer: allreduce.Transfer, chunks: int) -> str:
    first, last = transfer.start, transfer.start + transfer.elements - 1
    what = (f"chunk {transfer.chunk}" if transfer.chunk is not None
            else "whole tensor" if transfer.elements == chunks else f"chunks {first}-{last}")
    sign = "+=" if transfer.kind == "reduce" else "copy"
    return f"{transfer.src}→{transfer.dst} {what} ({sign})"


def allreduce_animation(n: int = 4, algorithm: str = "ring") -> go.Figure:
    """The all-reduce step by step: ranks × chunks, coloured by how many ranks' contributions
    each cell holds (1 = only its own, n = the full sum). Arrows show the step's transfers;
    the slider (or ▶) moves through the steps. Steps are numbered from 0, as in the simulators'
    ``schedule_table()`` and the chunk formulas (at step ``s`` rank ``r`` sends chunk ``(r-s) mod n``);
    the slider's first position, "start", is the state before step 0."""
    result, chunks = _counts(algorithm, n)
    states = [np.ones((n, chunks), dtype=np.int64)] + [np.asarray(s.buffers) for s in result.steps]
    titles = ["start: every rank holds only its own tensor"] + [
        f"after step {s.index} (steps 0 to {len(result.steps) - 1}): {s.phase}"
        for s in result.steps]
    transfers = [[]] + [s.transfers for s in result.steps]

    def heatmap(state):
        return go.Heatmap(z=state, x=list(range(chunks)), y=list(range(n)), zmin=1, zmax=n,
                          colorscale="Blues", text=state, texttemplate="%{text}",
                          colorbar=dict(title="ranks<br>summed", tickvals=list(range(1, n + 1))),
                          hovertemplate="rank %{y}, chunk %{x}: sum of %{z} ranks<extra></extra>")

    def arrows(moves):
        out = []
        for t in moves:
            cols = [t.chunk] if t.chunk is not None else _chunks_of(t, chunks)
            for c in cols:
                out.append(dict(x=c + 0.28, y=t.dst, ax=c + 0.28, ay=t.src, xref="x", yref="y",
                                axref="x", ayref="y", showarrow=True, arrowhead=2, arrowwidth=2,
                                arrowcolor=colour(t.src), opacity=0.85, text=""))
        return out

    def listing(moves):
        text = "; ".join(_describe(t, chunks) for t in moves) or "no transfers yet"
        return [dict(text="sends: " + wrap(text, 100), xref="paper", yref="paper", x=0, y=0,
                     yshift=-8, xanchor="left", yanchor="top", showarrow=False, align="left",
                     font=dict(size=12, color="#333333"))]

    frames = [go.Frame(name=str(i), data=[heatmap(states[i])],
                       layout=go.Layout(title=_title(algorithm, n, titles[i]),
                                        annotations=arrows(transfers[i]) + listing(transfers[i])))
              for i in range(len(states))]
    fig = go.Figure(data=[heatmap(states[0])], frames=frames)
    labels = ["start"] + [str(s.index) for s in result.steps]  # the tables' step numbers
    steps = [dict(label=labels[i], method="animate",
                  args=[[str(i)], dict(mode="immediate", frame=dict(duration=0, redraw=True),
                                       transition=dict(duration=0))]) for i in range(len(states))]
    # A page read without a kernel (GitHub, the site) shows one still: the frame where the
    # reduction is complete and nothing is sent back yet (scripts/static_figures.py reads this).
    reduced = [s.index for s in result.steps if s.phase in ("gather", "reduce-scatter", "fold")]
    fig.update_layout(
        meta=dict(still_frame=str(reduced[-1] + 1 if reduced else len(states) - 1)),
        sliders=[dict(active=0, steps=steps, currentvalue=dict(prefix="step "), y=0,
                      yanchor="top", pad=dict(t=60))],
        updatemenus=[dict(type="buttons", showactive=False, x=1.0, y=1.0, xanchor="right",
                          yanchor="bottom",
                          buttons=[dict(label="▶ play", method="animate",
                                        args=[None, dict(frame=dict(duration=900, redraw=True),
                                                         fromcurrent=True)])])],
        annotations=listing([]),
    )
    fig.update_xaxes(title="chunk", dtick=1, side="top")
    fig.update_yaxes(title="rank", dtick=1, autorange="reversed")
    return layout(fig, _title(algorithm, n, titles[0]), height=330 + 25 * n, left=_LEFT,
                  top=110, bottom=170)


def _title(algorithm: str, n: int, what: str) -> str:
    return f"{_ALGO_NAMES[algorithm]} all-reduce, {n} ranks: {what}"


def _chunks_of(t: allreduce.Transfer, chunks: int) -> list[int]:
    """The chunk columns a multi-chunk or whole-tensor transfer covers (one element per chunk)."""
    return list(range(t.start, min(t.start + t.elements, chunks)))


def bytes_per_rank(replicas=range(2, 17), nbytes: float = 100e6) -> go.Figure:
    """Bytes the busiest rank sends per all-reduce of ``nbytes``, as ranks are added (closed
    form, checked against the simulators in the tests)."""
    fig = go.Figure()
    for algo in allreduce.ALGORITHMS:
        ys = [allreduce.closed_form(algo, n, nbytes).max_bytes_sent / 1e6 for n in replicas]
        fig.add_trace(go.Scatter(x=list(replicas), y=ys, mode="lines+markers",
                                 name=_ALGO_NAMES[algo], line=dict(color=_ALGO_COLOURS[algo])))
    fig.update_xaxes(title="replicas n", dtick=2)
    fig.update_yaxes(title="MB sent by the busiest rank", type="log")
    return layout(fig, f"Traffic of the busiest rank, all-reducing {nbytes / 1e6:g} MB",
                  note="counted: bytes each rank sends in the schedule (mt.allreduce.closed_form)",
                  height=420, left=_LEFT, bottom=60)


def latency_bandwidth(interconnect: costmodel.Interconnect | str = "nvlink3-a100",
                      num_replicas: int = 8, sizes=None) -> go.Figure:
    """Predicted all-reduce time against message size for each algorithm on one link (log-log),
    with the size where the ring overtakes halving-doubling and reduce-to-one marked."""
    ic = costmodel.preset(interconnect) if isinstance(interconnect, str) else interconnect
    sizes = np.logspace(2, 10, 81) if sizes is None else np.asarray(sizes, dtype=float)
    fig = go.Figure()
    for algo in allreduce.ALGORITHMS:
        ys = [ic.allreduce_time(algo, num_replicas, s) * 1e6 for s in sizes]
        fig.add_trace(go.Scatter(x=sizes, y=ys, mode="lines", name=_ALGO_NAMES[algo],
                                 line=dict(color=_ALGO_COLOURS[algo], width=3)))
    for other in ("halving_doubling", "reduce_to_one"):
        cross = costmodel.crossover_bytes("ring", other, num_replicas, alpha=ic.alpha,
                                          beta=ic.beta)
        if cross is not None:
            fig.add_vline(x=cross, line=dict(color=_ALGO_COLOURS[other], dash="dot"))
            fig.add_annotation(x=np.log10(cross), y=1, yref="paper", showarrow=False,
                               yanchor="bottom", text=f"ring = {_ALGO_NAMES[other]}<br>"
                               f"at {_human_bytes(cross)}", font=dict(size=11))
    fig.update_xaxes(title="bytes per replica S", type="log")
    fig.update_yaxes(title="predicted time (µs)", type="log")
    note = (f"{_MODEL}; {num_replicas} replicas on {ic.name}: {ic.bandwidth_bytes_per_s / 1e9:g} "
            f"GB/s per direction, alpha = {ic.alpha * 1e6:g} µs per step. Source: {ic.source}")
    return layout(fig, f"Latency-bound, then bandwidth-bound: {num_replicas} replicas, {ic.name}",
                  note=wrap(note, 130), height=460, left=_LEFT, top=90, bottom=60)


def _human_bytes(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.3g} B"


def measured_vs_modelled(timings, implementation: str = "CollectiveAllReduce (RING)",
                         fitted: costmodel.Interconnect | None = None) -> go.Figure:
    """Measured all-reduce times on this machine (markers, one colour per replica count) and the
    cost model's lines with alpha and beta fitted to them (dashed).

    ``timings`` is what :func:`mirrortutor.measure.time_allreduce` returned (an
    :class:`~mirrortutor.collectives.timings.AllReduceTimings`); ``implementation`` is
    a name TensorFlow ran (or the ``cross_device_ops`` asked for). The dashed lines price the
    algorithm that implementation runs, as :func:`mirrortutor.costmodel.algorithm_for` says (NCCL's
    all-reduce is a ring); an implementation with no such algorithm has no model to draw.
    """
    rows = timings.select(implementation)
    if not rows:
        raise NotRecordedError(
            f"no all-reduce times of {implementation!r} were measured; measured: "
            f"{timings.implementations()}. Pick one of those, or time it with "
            "mt.measure.time_allreduce.")
    name = rows[0].implementation
    algorithm = costmodel.algorithm_for(name)
    if algorithm is None:
        raise UnknownAlgorithmError(
            f"{name} has no cost model to draw beside its times: it runs no single algorithm the "
            "model prices. Implementations with a model: "
            f"{list(costmodel.IMPLEMENTATION_ALGORITHM)}; pass one of those that was measured "
            "here.")
    fitted = timings.model_fit(implementation) if fitted is None else fitted
    fig = go.Figure()
    for i, n in enumerate(sorted({r.replicas for r in rows})):
        mine = [r for r in rows if r.replicas == n]
        xs = [r.bytes for r in mine]
        fig.add_trace(go.Scatter(x=xs, y=[r.seconds * 1e6 for r in mine], mode="markers",
                                 name=f"{n} replicas, measured",
                                 marker=dict(color=colour(i), size=10)))
        line = np.logspace(np.log10(min(xs)), np.log10(max(xs)), 30)
        fig.add_trace(go.Scatter(x=line, y=[fitted.allreduce_time(algorithm, n, s) * 1e6
                                            for s in line], mode="lines",
                                 name=f"{n} replicas, model fitted",
                                 line=dict(color=colour(i), dash="dash")))
    fig.update_xaxes(title="bytes per replica S", type="log")
    fig.update_yaxes(title="time per all-reduce (µs)", type="log")
    # timings.note is timing.measured_here: where the times come from, and what they cannot say
    beta = (f"1/({fitted.bandwidth_bytes_per_s / 1e9:.3g} GB/s)" if fitted.per_byte_cost_measured
            else "0 (no per-byte cost measurable: the fitted beta was <= 0, so it was dropped)")
    note = (f"{timings.note}. Dashed: {algorithm} cost model with alpha = "
            f"{fitted.alpha * 1e6:.3g} µs, beta = {beta} fitted to these points by least "
            "squares.")
    return layout(fig, f"{name}: measured on this machine vs the model",
                  note=wrap(note, 130), height=480, left=_LEFT, bottom=60)


def comm_share(num_parameters: float, compute_s: float, replicas=range(1, 17),
               interconnects=("pcie3-x16", "pcie4-x16", "nvlink3-a100", "ib-hdr", "eth-10g",
                              "eth-100g"), *, algorithm: str = "ring",
               title: str | None = None) -> go.Figure:
    """Predicted share of each training step spent waiting for the gradient all-reduce, as
    replicas are added, one line per interconnect preset (no overlap of compute and comms)."""
    rows = costmodel.estimate_grid(num_parameters, compute_s, replicas, interconnects,
                                   algorithm=algorithm)
    fig = go.Figure()
    for i, name in enumerate(dict.fromkeys(r["interconnect"] for r in rows)):
        mine = [r for r in rows if r["interconnect"] == name]
        fig.add_trace(go.Scatter(
            x=[r["num_replicas"] for r in mine], y=[100 * r["comm_share"] for r in mine],
            mode="lines+markers", name=name, line=dict(color=colour(i)),
            customdata=[[r["allreduce_s"] * 1e3, r["scaling_efficiency"] * 100] for r in mine],
            hovertemplate="%{x} replicas: %{y:.1f}% of the step<br>all-reduce %{customdata[0]:.2f}"
                          " ms, efficiency %{customdata[1]:.0f}%<extra>" + name + "</extra>"))
    fig.update_xaxes(title="replicas n", dtick=1 if len(list(replicas)) <= 16 else None)
    fig.update_yaxes(title="% of each step spent in all-reduce", range=[0, 100])
    gb = num_parameters * 4 / 1e9
    note = (f"{_MODEL}, {_ALGO_NAMES[algorithm]}; {num_parameters / 1e6:.3g}M float32 gradients "
            f"({gb:.3g} GB) all-reduced as one pack after a {compute_s * 1e3:g} ms "
            "forward+backward pass, no overlap. Link presets and their sources: "
            "mt.costmodel.preset(name).source")
    return layout(fig, title or "Share of a step spent in all-reduce, by interconnect",
                  note=wrap(note, 130), height=480, left=_LEFT, bottom=60)


__all__ = ["allreduce_animation", "bytes_per_rank", "comm_share", "latency_bandwidth",
           "measured_vs_modelled"]
