"""Chapter 06-07's figures: the recording ParameterServerStrategy's log, by worker, and loss curves."""

from __future__ import annotations

import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor.plots import ps as ps_plots
from mirrortutor.plots.style import colour
from mirrortutor.record.ps_trace import ParameterServerTrace, ScheduledRecord


@pytest.fixture(scope="module")
def functions():
    """A hand-made log: 3 workers, 12 functions, worker w's functions w versions stale (version
    read i - w, written i + 1), logged in reverse (the coordinator collects them in any order)."""
    return [ScheduledRecord(schedule=i, function="step_fn", worker=i % 3, started=10 + 0.1 * i,
                            ended=10 + 0.1 * i + 0.25, version_read=i - i % 3,
                            version_written=i + 1) for i in reversed(range(12))]


def test_staleness_histogram_counts_each_workers_functions_by_staleness(functions):
    """One bar group per staleness value, one bar per worker, and N − 1 marked; a trace and its
    list of functions draw the same."""
    trace = ParameterServerTrace()
    trace.functions = list(functions)
    for log in (functions, trace):
        fig = ps_plots.staleness_histogram(log)
        assert [t.name.split(" (")[0] for t in fig.data] == ["worker 0", "worker 1", "worker 2"]
        for w, bars in enumerate(fig.data):
            assert list(bars.x) == [0, 1, 2] and bars.marker.color == colour(w)
            want = [int(sum(f.staleness == b for f in functions if f.worker == w))
                    for b in range(3)]
            assert list(bars.y) == want == [4 if b == w else 0 for b in range(3)]
        assert fig.layout.shapes[0].x0 == 2  # the dashed N − 1 line


def test_a_worker_that_ran_nothing_still_gets_its_series(functions):
    fig = ps_plots.staleness_histogram([f for f in functions if f.worker != 2], workers=3)
    assert [t.name.split(" (")[0] for t in fig.data] == ["worker 0", "worker 1", "worker 2"]
    assert sum(fig.data[2].y) == 0 and fig.layout.shapes[0].x0 == 2


def test_timeline_draws_each_function_from_start_to_end(functions):
    """Every function is a bar starting when it started (seconds after the first start), as long
    as it ran, taken in version order."""
    fig = ps_plots.timeline(functions, first=0, count=12)
    assert sum(len(t.x) for t in fig.data) == 12
    for w, bars in enumerate(fig.data):
        mine = sorted((f for f in functions if f.worker == w), key=lambda f: f.version_written)
        assert list(bars.base) == pytest.approx([f.started - 10 for f in mine])
        assert list(bars.x) == pytest.approx([f.ended - f.started for f in mine])
    shown = ps_plots.timeline(functions, first=3, count=2)
    assert sum(len(t.x) for t in shown.data) == 2


@pytest.fixture(scope="module")
def curve():
    """12 updates of 32 examples, a loss falling as 2 / (i + 1), one update every 0.1 s."""
    i = np.arange(12)
    return ps_plots.Curve(32 * (i + 1), 2.0 / (i + 1), 0.1 * (i + 1))


def test_convergence_plots_loss_per_example_and_per_second_and_needs_a_run(curve):
    """Two panels with the same losses, against examples seen and seconds; no runs is an error;
    a plain tuple is a curve too."""
    for run in (curve, tuple(curve)):
        per_example, per_second = ps_plots.convergence({"async": run}, window=32).data
        assert list(per_example.y) == list(per_second.y) == pytest.approx(list(curve.losses))
        assert list(per_example.x) == list(curve.examples_seen)
        assert list(per_second.x) == pytest.approx(list(curve.seconds))
    with pytest.raises(mt.errors.InvalidQuantityError, match="at least one run"):
        ps_plots.convergence({})


def test_convergence_smooths_over_examples_not_updates(curve):
    """The window is in examples: 96 examples are 3 updates of 32 (a running mean of 3)."""
    loss = np.asarray(curve.losses)
    y = ps_plots.convergence({"async": curve}, window=96).data[0].y
    assert y[5] == pytest.approx(loss[3:6].mean()) and y[0] == pytest.approx(loss[0])


def test_convergence_draws_the_mean_of_seeds_and_their_band(curve):
    """Seeds of one set-up: one line at their mean (cut to the shortest), a band from min to max."""
    other = ps_plots.Curve(curve.examples_seen[:10], curve.losses[:10] + 1.0, curve.seconds[:10])
    band, line, per_second = ps_plots.convergence({"async": [curve, other]}, window=32).data
    assert line.name == "async (2 runs)" and len(line.x) == 10
    np.testing.assert_allclose(line.y, curve.losses[:10] + 0.5)
    np.testing.assert_allclose(band.y[:10], other.losses)  # upper edge, then lower
    np.testing.assert_allclose(band.y[10:], curve.losses[:10][::-1])
    assert band.fill == "toself" and not band.showlegend and per_second.showlegend is False


@pytest.mark.parametrize("bad, words", [
    ("a trace", "Curve(examples_seen, losses, seconds)"),
    (([32, 64], [1.0], [0.1, 0.2]), "one entry per update"),
])
def test_a_run_that_is_not_a_curve_says_what_to_pass(bad, words):
    with pytest.raises(mt.errors.InvalidQuantityError, match=words.replace("(", r"\(").replace(
            ")", r"\)")):
        ps_plots.convergence({"run": bad})
