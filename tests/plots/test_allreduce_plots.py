"""Chapter 04's figures show what the simulators and the cost model say, and label their source."""

from __future__ import annotations

import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor.collectives import costmodel
from mirrortutor.collectives.timings import AllReduceTimings, Measurement
from mirrortutor.plots import allreduce as allreduce_plots
from mirrortutor.timing import measured_here


@pytest.mark.parametrize("algorithm", mt.allreduce.ALGORITHMS)
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_animation_has_a_frame_per_step_and_ends_with_every_cell_full(algorithm, n):
    """Frame 0 is the start (all 1s), then one frame per schedule step; the last is all n."""
    fig = allreduce_plots.allreduce_animation(n, algorithm)
    steps = mt.allreduce.closed_form(algorithm, n, 0).steps
    assert len(fig.frames) == steps + 1 == len(fig.layout.sliders[0].steps)
    assert np.all(np.asarray(fig.frames[0].data[0].z) == 1)
    assert np.all(np.asarray(fig.frames[-1].data[0].z) == n)


def test_ring_frames_draw_one_arrow_per_rank_and_list_the_sends():
    """Every ring step moves one chunk per rank: n arrows, and a line naming each transfer."""
    n = 4
    fig = allreduce_plots.allreduce_animation(n, "ring")
    for frame in fig.frames[1:]:
        arrows = [a for a in frame.layout.annotations if a.showarrow]
        assert len(arrows) == n
        (listing,) = [a for a in frame.layout.annotations if not a.showarrow]
        assert listing.text.count("→") == n


def test_whole_tensor_sends_draw_an_arrow_in_every_chunk_column():
    """Reduce-to-one sends whole tensors: each of its n-1 sends per step has an arrow per column."""
    n = 4
    fig = allreduce_plots.allreduce_animation(n, "reduce_to_one")
    for frame in fig.frames[1:]:
        arrows = [a for a in frame.layout.annotations if a.showarrow]
        drawn = sorted((a.ay, a.y, round(a.x - 0.28)) for a in arrows)  # (from, to, column)
        assert drawn == sorted((src, dst, c) for src, dst in _reduce_to_one_sends(frame.name, n)
                               for c in range(n))


def _reduce_to_one_sends(frame: str, n: int) -> list[tuple[int, int]]:
    """Reference: step 1 gathers every rank into rank 0, step 2 broadcasts from it."""
    others = range(1, n)
    return [(r, 0) for r in others] if frame == "1" else [(0, r) for r in others]


def test_model_charts_state_their_assumptions():
    """Modelled charts name the model, the preset and its source."""
    lb = allreduce_plots.latency_bandwidth("nvlink3-a100", 6)
    notes = " ".join(a.text for a in lb.layout.annotations)
    assert "alpha-beta" in notes and "nvlink3-a100" in notes and "whitepaper" in notes
    assert "ring = halving-doubling" in notes  # the crossover is marked for n = 6
    share = allreduce_plots.comm_share(25.6e6, 0.1, replicas=range(1, 5))
    assert "alpha-beta" in share.layout.annotations[0].text
    assert max(max(t.y) for t in share.data) <= 100


def test_unknown_algorithm_is_a_clear_error():
    """A misspelt algorithm names the known ones."""
    with pytest.raises(mt.errors.UnknownAlgorithmError, match="ring"):
        allreduce_plots.allreduce_animation(4, "tree")


# ---- measured_vs_modelled, on timings made by hand (mt.measure would time TensorFlow itself) ----
ALPHA, BETA = 3e-5, 1 / 2e9  # the link the hand-made times come from


def timings_of(implementation: str, algorithm: str = "ring") -> AllReduceTimings:
    """Times that ``algorithm`` would take on the (ALPHA, BETA) link, as TF's ``implementation``."""
    rows = []
    for n in (2, 4):
        for size in (10_000, 1_000_000, 100_000_000):
            t = costmodel.allreduce_time(algorithm, n, size, alpha=ALPHA, beta=BETA)
            rows.append(Measurement(implementation, "auto", n, size, t, costmodel.algbw(size, t),
                                    costmodel.busbw(size, t, n), "CPU", 5))
    return AllReduceTimings(rows)


@pytest.mark.parametrize("implementation, algorithm", [
    ("CollectiveAllReduce (RING)", "ring"),
    ("CollectiveAllReduce (NCCL)", "ring"),  # NCCL all-reduces in a ring
    ("NcclAllReduce", "ring"),
    ("ReductionToOneDevice", "reduce_to_one"),
])
def test_measured_vs_modelled_draws_the_model_of_the_algorithm_tf_ran(implementation, algorithm):
    """The dashed line at n replicas is the cost of the algorithm the implementation runs."""
    fig = allreduce_plots.measured_vs_modelled(timings_of(implementation, algorithm),
                                               implementation)
    other = "reduce_to_one" if algorithm == "ring" else "ring"
    models = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in models] == ["2 replicas, model fitted", "4 replicas, model fitted"]
    for n, line in zip((2, 4), models):
        expected = [costmodel.allreduce_time(algorithm, n, s, alpha=ALPHA, beta=BETA) * 1e6
                    for s in line.x]
        wrong = [costmodel.allreduce_time(other, n, s, alpha=ALPHA, beta=BETA) * 1e6
                 for s in line.x]
        assert list(line.y) == pytest.approx(expected, rel=1e-6)
        assert list(line.y) != pytest.approx(wrong, rel=0.05)  # the models differ: a real check
    note = fig.layout.annotations[0].text.replace("<br>", " ")
    assert note.startswith(measured_here("CPU")) and f"Dashed: {algorithm} cost model" in note


def test_a_fit_whose_times_do_not_grow_with_size_says_it_measured_no_bandwidth():
    """Times flat in S give a least-squares beta <= 0: the fit drops the term and says so
    (chapter 04's CPU timings), instead of reporting a bandwidth of 1e21 GB/s."""
    rows = [Measurement("CollectiveAllReduce (RING)", "auto", n, size, 1e-3 * n + (5e-3 if size
                        == 10_000 else 0.0), 1.0, 1.0, "CPU", 5)
            for n in (2, 4) for size in (10_000, 1_000_000)]
    flat = AllReduceTimings(rows)
    fitted = flat.model_fit("CollectiveAllReduce (RING)")
    assert not fitted.per_byte_cost_measured and "no per-byte cost measurable" in fitted.source
    assert fitted.alpha > 0
    note = allreduce_plots.measured_vs_modelled(flat, "CollectiveAllReduce (RING)").layout \
        .annotations[0].text.replace("<br>", " ")
    assert "no per-byte cost measurable" in note and "GB/s" not in note
    assert timings_of("CollectiveAllReduce (RING)").model_fit(
        "CollectiveAllReduce (RING)").per_byte_cost_measured  # a real bandwidth stays measured


def test_measured_vs_modelled_without_a_model_names_the_ones_with_one():
    """An implementation the cost model cannot price is a clear error, not a wrong curve."""
    timings = timings_of("HierarchicalCopyAllReduce")
    with pytest.raises(mt.errors.UnknownAlgorithmError,
                       match=r"HierarchicalCopyAllReduce has no cost model.*NcclAllReduce"):
        allreduce_plots.measured_vs_modelled(timings, "HierarchicalCopyAllReduce")


def test_measured_vs_modelled_of_something_not_measured_lists_what_was():
    """Asking for an implementation the timings do not hold says which ones they do hold."""
    timings = timings_of("CollectiveAllReduce (RING)")
    with pytest.raises(mt.errors.NotRecordedError,
                       match=r"NcclAllReduce.*'CollectiveAllReduce \(RING\)'"):
        allreduce_plots.measured_vs_modelled(timings, "NcclAllReduce")


def test_animation_numbers_steps_as_the_schedule_tables_do():
    """One numbering: the slider and the titles count steps from 0, as schedule_table() does."""
    fig = allreduce_plots.allreduce_animation(4, "reduce_to_one")
    table_steps = sorted({row["step"] for row in
                          mt.allreduce.reduce_to_one([np.ones(4)] * 4).schedule_table()})
    labels = [s.label for s in fig.layout.sliders[0].steps]
    assert labels == ["start"] + [str(s) for s in table_steps] == ["start", "0", "1"]
    assert fig.frames[1].layout.title.text.count("after step 0") == 1
