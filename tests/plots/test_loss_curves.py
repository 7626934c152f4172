"""Chapter 10's convergence figure: runs drawn from plain (examples, losses) numbers."""

from __future__ import annotations

import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor.errors import InvalidQuantityError


def test_one_line_per_label_the_mean_over_seeds_with_a_band():
    examples = np.arange(1, 11) * 32
    runs = {"one device": [(examples, np.full(10, 2.0)), (examples, np.full(10, 4.0))],
            "mirrored": [(np.arange(1, 5) * 96, np.array([3.0, 2.0, 1.0, 0.5]))]}
    fig = mt.plots.loss_curves(runs, window=1)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in lines] == ["one device (2 seeds)", "mirrored"]
    assert np.allclose(lines[0].y, 3.0)  # the mean of the two seeds
    assert np.allclose(lines[1].y, [3.0, 2.0, 1.0, 0.5])  # window 1: not smoothed
    assert list(lines[1].x) == [96, 192, 288, 384]
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(bands) == 1 and max(bands[0].y) == 4.0 and min(bands[0].y) == 2.0


def test_losses_are_smoothed_over_the_window_in_examples():
    fig = mt.plots.loss_curves({"a": [(np.arange(1, 5) * 32, np.array([4.0, 2.0, 4.0, 2.0]))]},
                               window=64)
    assert np.allclose(fig.data[0].y, [4.0, 3.0, 3.0, 3.0])  # the mean of the last 2 updates


@pytest.mark.parametrize("runs", [{}, {"a": []}, {"a": [(np.arange(2), np.ones(3))]}])
def test_bad_runs_are_a_plain_error(runs):
    with pytest.raises(InvalidQuantityError):
        mt.plots.loss_curves(runs)
