"""Chapter 04's figures show what the simulators and the cost model say, and label their source."""

from __future__ import annotations

import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor import allreduce_plots


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
