"""The captures' shortcuts give the records the long way would: numpy only, no TensorFlow."""

import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor.record.captures import kept_copies, max_abs_diff
from mirrortutor.record.records import AllReduceRecord, norms


def subtraction(copies) -> float:
    """The sync check's definition: the largest float64 |copy_r - copy_0|."""
    first = np.asarray(copies[0], np.float64)
    return max((float(np.max(np.abs(np.asarray(c, np.float64) - first))) for c in copies[1:]
                if np.size(c)), default=0.0)


@pytest.mark.parametrize("values", [
    np.arange(6, dtype=np.float32), np.array([1.0, np.inf]), np.array([np.nan, 2.0], np.float32),
    np.array([0.0, 1.0]), np.arange(4, dtype=np.int64), np.array([True, False]),
    np.array([1.5, -2.0], np.float16)])
def test_sync_diff_of_equal_copies_is_the_subtractions(values):
    """Copies bit for bit equal skip the subtraction, and still give what it gives (0, or NaN
    where a copy holds an inf or a NaN); a copy that differs (-0.0 for 0.0 included) is
    subtracted."""
    other = values.copy()
    if values.dtype.kind == "f":
        other[0] = -other[0] if values[0] == 0 else other[0] + 1
    for copies in ([values, values.copy(), values.copy()], [values, other, values.copy()]):
        assert np.array_equal(max_abs_diff(copies), subtraction(copies), equal_nan=True)


def test_identical_copies_are_kept_once_and_never_as_tensorflows_buffer():
    a = np.array([0.0, 1.0, 2.0], np.float32)
    b = np.array([-0.0, 1.0, 2.0], np.float32)  # equal by ==, not bit for bit
    kept = kept_copies([a, a.copy(), b])
    assert kept[0] is kept[1] and kept[0] is not a and kept[2] is not kept[0]
    assert all(np.array_equal(k, c) for k, c in zip(kept, [a, a, b]))
    assert np.signbit(kept[2][0]) and not np.signbit(kept[0][0])


def test_norms_of_kept_values_are_computed_when_read_and_saved(tmp_path):
    """A record made without norms (its values kept whole) gives the norms computed now would,
    and a saved trace holds them, as before."""
    rng = np.random.default_rng(0)
    ins = [[rng.standard_normal(5).astype(np.float32) for _ in range(2)]]
    outs = [[ins[0][0] + ins[0][1]] * 2]
    lazy = AllReduceRecord(0, 0, "batch_reduce", "SUM", "x", ["w"], [(5,)], None, None, ins, outs)
    assert np.array_equal(lazy.input_norms, norms(ins))
    assert np.array_equal(lazy.output_norms, norms(outs)) and lazy.num_replicas == 2
    trace = mt.Trace()
    trace.slot(0).allreduces.append(
        AllReduceRecord(0, 0, "batch_reduce", "SUM", "x", ["w"], [(5,)], None, None, ins, outs))
    trace.save(tmp_path / "t.npz")
    loaded = mt.Trace.load(tmp_path / "t.npz").allreduces()[0]
    assert np.array_equal(loaded.input_norms, norms(ins))
    assert np.array_equal(loaded.output_norms, norms(outs))
