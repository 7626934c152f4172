"""The plots share one house style, and drawing never needs TensorFlow."""

from __future__ import annotations

import plotly.graph_objects as go

from conftest import run_python
from mirrortutor.plots import style
from mirrortutor.timing import measured_here


def test_importing_every_plots_module_leaves_tensorflow_unloaded():
    """A fresh interpreter imports mirrortutor.plots and all its modules without TensorFlow."""
    result = run_python("""
        import sys
        import mirrortutor.plots, mirrortutor.plots.allreduce, mirrortutor.plots.ps
        import mirrortutor.plots.scaling, mirrortutor.plots.style, mirrortutor.plots.trace
        print("tensorflow" in sys.modules, "keras" in sys.modules)
    """, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_wrap_breaks_at_word_boundaries_within_the_width():
    """Each line fits the width, no word is cut, and the words come back in order."""
    text = "alpha-beta cost model with alpha = 3 µs per step and beta = 1/(2 GB/s) fitted " * 3
    lines = style.wrap(text, 40).split("<br>")
    assert all(len(line) <= 40 for line in lines) and len(lines) > 1
    assert " ".join(lines).split() == text.split()
    word = "a-single-word-longer-than-the-width"
    assert style.wrap(word, 5) == word


def test_layout_makes_room_for_each_line_of_the_note():
    """A two-line note adds two lines' height and bottom margin, and becomes one footnote."""
    plain = style.layout(go.Figure(), "t", height=400, bottom=60)
    noted = style.layout(go.Figure(), "t", note="one<br>two", height=400, bottom=60)
    extra = 2 * style.NOTE_LINE_PX
    assert noted.layout.height == plain.layout.height + extra == 400 + extra
    assert noted.layout.margin.b == plain.layout.margin.b + extra
    assert len(plain.layout.annotations) == 0
    (note,) = noted.layout.annotations
    assert note.text == "one<br>two" and note.showarrow is False
    assert plain.layout.template == go.Figure(layout=dict(template=style.TEMPLATE)).layout.template


def test_measured_time_charts_carry_the_measured_here_caption():
    """The scaling charts' captions are timing.measured_here, for CPU and for GPU runs."""
    from mirrortutor.plots import scaling

    for kind in ("logical CPU", "GPU"):
        run = dict(label="1 replica(s)", device_kind=kind, replicas=1, per_replica_batch=16,
                   global_batch=16, step_s=0.02, parameters=4810, compute_s=0.01,
                   allreduce_s=0.0, input_s=0.001)
        unwrapped = lambda fig: " ".join(fig.layout.annotations[0].text.split("<br>"))  # noqa: E731
        assert unwrapped(scaling.time_chart([run])) == measured_here(kind)
        caption = unwrapped(scaling.scaling_chart([run], "pcie4-x16"))
        assert caption.startswith(measured_here(kind) + " modelled") and "pcie4-x16" in caption


def test_scaling_charts_fit_their_small_print_in_550_px():
    """The captions of chapter 05's two charts are wrapped for 550 px, under the x-axis (the
    house footnote), with the legend over the plot: nothing overlaps the axis title or ticks."""
    from mirrortutor.plots import scaling

    run = dict(label="8 replica(s), batch 128, fixed", replicas=8, per_replica_batch=16,
               global_batch=128, step_s=0.02, parameters=4810, compute_s=0.01, allreduce_s=0.0,
               input_s=0.001)
    for fig in (scaling.time_chart([run]), scaling.scaling_chart([run], "nvlink3-a100")):
        (note,) = fig.layout.annotations
        assert fig.layout.width == 550 and note.yanchor == "top" and note.yshift < 0
        assert all(len(line) <= scaling.NOTE_CHARS for line in note.text.split("<br>"))
        assert fig.layout.legend.orientation == "h" and fig.layout.legend.y > 1
    ticks = scaling.time_chart([run]).layout.xaxis.ticktext
    assert ticks == ("8 replica(s)<br>batch 128<br>fixed",)
