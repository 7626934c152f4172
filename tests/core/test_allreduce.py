"""The from-scratch all-reduce simulators against numpy, the textbook counts, and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mirrortutor.collectives.allreduce import (
    ALGORITHMS,
    AllReduceResult,
    closed_form,
    halving_doubling,
    reduce_to_one,
    ring,
)
from mirrortutor.collectives.simulator import Simulator, chunk_bounds
from mirrortutor.errors import (
    ChunkCountError,
    InvalidQuantityError,
    MirrortutorError,
    PerReplicaValuesError,
    RankError,
    ReplicaCountError,
    ShapeMismatchError,
    UnknownAlgorithmError,
    UnknownReduceOpError,
    UnsupportedDtypeError,
)

SIMULATORS = {"reduce_to_one": reduce_to_one, "ring": ring, "halving_doubling": halving_doubling}
RANKS = range(1, 10)  # 1..9: powers of two and not
SHAPES = [(0,), (1,), (5,), (7,), (24,), (25,), (3, 4), (2, 3, 5)]  # incl. smaller than n, odd


def _values(n: int, shape: tuple, dtype: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        return [rng.integers(-1000, 1000, shape).astype(np.int32) for _ in range(n)]
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


# --------------------------------------------------------------------------- values are right


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("shape", SHAPES)
def test_sum_matches_numpy_on_every_rank(algorithm, n, shape):
    """Every rank ends with np.sum over ranks: exact for int32, allclose for float32."""
    for dtype in ("int32", "float32"):
        values = _values(n, shape, dtype, seed=n)
        result = SIMULATORS[algorithm](values)
        expected = np.sum(values, axis=0)
        assert len(result.values) == n
        for got in result.values:
            assert got.shape == shape and got.dtype == values[0].dtype
            if dtype == "int32":
                np.testing.assert_array_equal(got, expected)
            else:
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", [1, 3, 4, 7])
def test_mean_matches_numpy(algorithm, n):
    """op="mean" equals np.mean over ranks, on every rank."""
    values = _values(n, (4, 5), "float32", seed=1)
    result = SIMULATORS[algorithm](values, op="mean")
    for got in result.values:
        np.testing.assert_allclose(got, np.mean(values, axis=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_inputs_are_not_modified(algorithm):
    """The simulators work on copies: the caller's per-replica arrays are left as they were."""
    values = _values(4, (6,), "float32")
    before = [v.copy() for v in values]
    SIMULATORS[algorithm](values)
    for v, b in zip(values, before):
        np.testing.assert_array_equal(v, b)


def test_ring_really_moves_chunks_step_by_step():
    """With record=True the buffers show partial sums mid-schedule, not the answer at once."""
    values = [np.full(4, 10.0 ** r) for r in range(4)]  # rank r holds 10**r everywhere
    result = ring(values, record=True)
    after_first = result.steps[0].buffers
    # Step 0: rank r received chunk r-1 from rank r-1 and added it; nothing else changed yet.
    assert after_first[1][0] == 1 + 10 and after_first[1][1] == 10
    # After reduce-scatter, rank r owns the full sum of chunk (r+1) % n only.
    after_rs = result.steps[2].buffers
    for r in range(4):
        assert after_rs[r][(r + 1) % 4] == 1111
    assert all(np.array_equal(b, np.full(4, 1111.0)) for b in result.steps[-1].buffers)


def test_record_off_keeps_no_buffers():
    """By default no per-step snapshots are kept (they cost memory for big tensors)."""
    assert all(step.buffers is None for step in ring(_values(3, (5,), "float32")).steps)


# --------------------------------------------------------------------------- schedule shape


@pytest.mark.parametrize("n", RANKS)
def test_ring_has_two_n_minus_one_steps_each_to_right_neighbour(n):
    """Ring: 2(n-1) steps, each with n transfers r -> (r+1) mod n; reduce first, then copy."""
    result = ring(_values(n, (10,), "float32"))
    assert result.num_steps == 2 * (n - 1)
    for step in result.steps:
        pairs = sorted((t.src, t.dst) for t in step.transfers)
        assert pairs == [(r, (r + 1) % n) for r in range(n)]
        expected_kind = "reduce" if step.index < n - 1 else "copy"
        assert all(t.kind == expected_kind for t in step.transfers)


@pytest.mark.parametrize("n", RANKS)
def test_ring_chunk_rule(n):
    """Reduce-scatter step s: rank r sends chunk (r-s) mod n; all-gather step s: (r+1-s) mod n."""
    result = ring(_values(n, (2 * n + 1,), "float32"))
    for s in range(n - 1):
        for t in result.steps[s].transfers:
            assert t.chunk == (t.src - s) % n
        for t in result.steps[n - 1 + s].transfers:
            assert t.chunk == (t.src + 1 - s) % n


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("size", [0, 1, 5, 7, 24, 25])
def test_ring_chunks_follow_array_split(n, size):
    """The ring's chunk sizes are exactly np.array_split's, so odd sizes and size < n work."""
    result = ring(_values(n, (size,), "int32"))
    expected = [len(c) for c in np.array_split(np.arange(size), n)]
    for step in result.steps:
        for t in step.transfers:
            assert t.elements == expected[t.chunk]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_halving_doubling_pairs_are_xor_partners(n):
    """Power-of-two n: step k pairs rank r with r XOR 2**k, then the all-gather walks back."""
    result = halving_doubling(_values(n, (16,), "float32"))
    k = int(math.log2(n))
    distances = [1 << i for i in range(k)] + [1 << i for i in reversed(range(k))]
    assert result.num_steps == 2 * k
    for step, d in zip(result.steps, distances):
        assert sorted((t.src, t.dst) for t in step.transfers) == [(r, r ^ d) for r in range(n)]


@pytest.mark.parametrize("n", [3, 5, 6, 7, 9])
def test_halving_doubling_non_power_of_two_adds_fold_and_unfold(n):
    """Non-power-of-two n: one fold step first and one unfold step last, 2*log2(p)+2 in all."""
    p = 1 << (n.bit_length() - 1)
    result = halving_doubling(_values(n, (12,), "float32"))
    assert result.num_steps == 2 * int(math.log2(p)) + 2
    assert result.steps[0].phase == "fold" and result.steps[-1].phase == "unfold"
    extra = n - p
    fold = [(t.src, t.dst) for t in result.steps[0].transfers]
    unfold = [(t.src, t.dst) for t in result.steps[-1].transfers]
    assert fold == [(2 * i, 2 * i + 1) for i in range(extra)]
    assert unfold == [(2 * i + 1, 2 * i) for i in range(extra)]


@pytest.mark.parametrize("n", RANKS)
def test_reduce_to_one_gathers_then_broadcasts(n):
    """Reduce-to-one: a gather step into the root and a broadcast step out of it (none for n=1)."""
    result = reduce_to_one(_values(n, (3,), "float32"), root=n - 1)
    assert [s.phase for s in result.steps] == (["gather", "broadcast"] if n > 1 else [])
    if n > 1:
        assert {t.dst for t in result.steps[0].transfers} == {n - 1}
        assert {t.src for t in result.steps[1].transfers} == {n - 1}


# --------------------------------------------------------------------------- byte counts


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("size", [0, 3, 7, 25])
def test_bytes_sent_is_sum_over_transfers(algorithm, n, size):
    """Each rank's bytes_sent_per_rank equals the sum of elements*itemsize over its transfers."""
    result = SIMULATORS[algorithm](_values(n, (size,), "float32"))
    for rank, sent in enumerate(result.bytes_sent_per_rank()):
        mine = [t for s in result.steps for t in s.transfers if t.src == rank]
        assert sent == sum(t.bytes for t in mine) == sum(t.elements * 4 for t in mine)
    assert sum(result.bytes_sent_per_rank()) == sum(result.bytes_received_per_rank())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", RANKS)
def test_simulation_matches_closed_form_when_sizes_divide(algorithm, n):
    """Steps and per-rank bytes equal closed_form exactly when the element count divides evenly."""
    elements = 2 * 5 * 7 * 8 * 9  # divisible by every n in 1..9 and every power of two <= 8
    result = SIMULATORS[algorithm](_values(n, (elements,), "float32"))
    cf = closed_form(algorithm, n, elements * 4)
    assert result.num_steps == cf.steps
    assert result.bytes_sent_per_rank() == pytest.approx(cf.bytes_sent_per_rank)


@pytest.mark.parametrize("n", RANKS)
def test_ring_textbook_numbers(n):
    """Ring closed form: 2(n-1) steps and 2(n-1)/n*S per rank, 2(n-1)*S in total."""
    cf = closed_form("ring", n, 1000.0)
    assert cf.steps == 2 * (n - 1)
    assert cf.max_bytes_sent == pytest.approx(2 * (n - 1) / n * 1000)
    assert cf.total_bytes_sent == pytest.approx(2 * (n - 1) * 1000)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_power_of_two_textbook_numbers(n):
    """Halving-doubling closed form for power-of-two n: 2*log2(n) steps, 2(n-1)/n*S per rank."""
    cf = closed_form("halving_doubling", n, 1000.0)
    assert cf.steps == 2 * int(math.log2(n))
    assert cf.bytes_sent_per_rank == pytest.approx([2 * (n - 1) / n * 1000] * n)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_reduce_to_one_moves_as_much_as_ring_but_root_carries_it(n):
    """Reduce-to-one sends the same total as the ring but its root sends (n-1)*S alone."""
    flat, rng = closed_form("reduce_to_one", n, 1.0), closed_form("ring", n, 1.0)
    assert flat.steps == 2
    assert flat.total_bytes_sent == pytest.approx(rng.total_bytes_sent)
    assert flat.max_bytes_sent == n - 1


@pytest.mark.parametrize("n", RANKS)
def test_ring_bytes_with_uneven_chunks(n):
    """Odd sizes: each rank sends exactly the sizes of the chunks it forwarded."""
    size = 3 * n + 2
    sizes = [len(c) for c in np.array_split(np.arange(size), n)]
    sent = ring(_values(n, (size,), "int32")).bytes_sent_per_rank()
    for r in range(n):
        rs = [sizes[(r - s) % n] for s in range(n - 1)]
        ag = [sizes[(r + 1 - s) % n] for s in range(n - 1)]
        assert sent[r] == 4 * (sum(rs) + sum(ag))


def test_schedule_table_rows():
    """schedule_table() gives one plain dict per transfer with the documented keys."""
    result = ring(_values(3, (6,), "float32"))
    rows = result.schedule_table()
    assert len(rows) == sum(len(s.transfers) for s in result.steps) == 12
    assert set(rows[0]) == {"step", "phase", "src", "dst", "chunk", "start", "elements", "bytes",
                            "kind"}
    assert rows[0] == {"step": 0, "phase": "reduce-scatter", "src": 0, "dst": 1, "chunk": 0,
                       "start": 0, "elements": 2, "bytes": 8, "kind": "reduce"}
    assert isinstance(result, AllReduceResult) and result.num_ranks == 3


def test_single_rank_needs_no_communication():
    """n=1: zero steps, zero bytes, and the value comes back unchanged."""
    for algorithm, simulate in SIMULATORS.items():
        result = simulate([np.arange(5, dtype=np.int32)])
        assert result.num_steps == 0 and result.bytes_sent_per_rank() == [0]
        np.testing.assert_array_equal(result.values[0], np.arange(5))
        assert closed_form(algorithm, 1, 20).bytes_sent_per_rank == [0]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_empty_list_raises(algorithm):
    """No ranks at all is a ReplicaCountError that says what to pass instead."""
    with pytest.raises(ReplicaCountError, match="at least one"):
        SIMULATORS[algorithm]([])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_shape_mismatch_raises(algorithm):
    """Ranks with different shapes are a ShapeMismatchError naming the offending rank."""
    with pytest.raises(ShapeMismatchError, match="rank 2 holds shape \\(4,\\)"):
        SIMULATORS[algorithm]([np.zeros(3), np.zeros(3), np.zeros(4)])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_dtype_mismatch_raises(algorithm):
    """Ranks with different dtypes are a ShapeMismatchError too (same shape, float32 vs int32)."""
    with pytest.raises(ShapeMismatchError, match="dtype int32"):
        SIMULATORS[algorithm]([np.zeros(3, np.float32), np.zeros(3, np.int32)])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_unknown_op_raises(algorithm):
    """An op other than sum/mean is an UnknownReduceOpError, also a ValueError."""
    with pytest.raises(UnknownReduceOpError, match="'max'") as info:
        SIMULATORS[algorithm]([np.zeros(2)], op="max")
    assert isinstance(info.value, ValueError) and isinstance(info.value, MirrortutorError)


NOT_ONE_PER_RANK = {"None": None, "a number": 3.0, "a string": "abc", "a dict": {0: np.zeros(2)},
                    "one 1-D array": np.zeros(8), "a 0-d array": np.array(1.0)}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("what", NOT_ONE_PER_RANK)
def test_values_that_are_not_one_array_per_rank_raise(algorithm, what):
    """None, a number, text, a dict or a single 1-D array: PerReplicaValuesError (a TypeError,
    as Python's own was) that says to pass a list with one array per rank."""
    with pytest.raises(PerReplicaValuesError, match="pass a list with one numpy array per rank") \
            as info:
        SIMULATORS[algorithm](NOT_ONE_PER_RANK[what])
    assert isinstance(info.value, TypeError) and isinstance(info.value, MirrortutorError)


def test_the_simulator_itself_checks_its_values():
    """Simulator (the machinery under the algorithms) refuses the same inputs the same way."""
    with pytest.raises(PerReplicaValuesError, match="one array per rank"):
        Simulator(None, record=False)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_ragged_rank_raises(algorithm):
    """A rank whose nested list is not rectangular: a ShapeMismatchError naming the rank."""
    with pytest.raises(ShapeMismatchError, match="rank 1's value is not a rectangular array"):
        SIMULATORS[algorithm]([[1.0, 2.0], [[1.0], [2.0, 3.0]]])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_missing_values_raise(algorithm):
    """A rank holding None cannot be summed: UnsupportedDtypeError (dtype object)."""
    with pytest.raises(UnsupportedDtypeError, match="dtype object"):
        SIMULATORS[algorithm]([None, None])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rows_of_a_2d_array_and_a_generator_are_ranks(algorithm):
    """A (ranks, size) array and a generator of arrays work as a list of arrays does."""
    values = _values(3, (5,), "float32")
    want = SIMULATORS[algorithm](values).values
    for given in (np.stack(values), (v for v in values)):
        got = SIMULATORS[algorithm](given).values
        assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == 3


@pytest.mark.parametrize("op", [None, ["sum"], 1])
def test_an_op_that_is_not_a_name_raises(op):
    """op=None, a list or a number: UnknownReduceOpError, not Python's own error."""
    with pytest.raises(UnknownReduceOpError, match="expected one of"):
        ring([np.zeros(2)], op=op)


@pytest.mark.parametrize("parts", [0, -1, 2.5, None])
def test_chunk_bounds_needs_a_whole_number_of_chunks(parts):
    """chunk_bounds(size, 0) would divide by zero: a ChunkCountError instead."""
    with pytest.raises(ChunkCountError, match="whole number >= 1"):
        chunk_bounds(10, parts)


def test_non_numeric_dtype_raises():
    """Strings cannot be summed: UnsupportedDtypeError, a TypeError."""
    with pytest.raises(UnsupportedDtypeError, match="cannot be summed") as info:
        ring([np.array(["a"]), np.array(["b"])])
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("num_chunks", [1, 3, 8, 0, -4, True])
def test_ring_wrong_chunk_count_raises(num_chunks):
    """The ring uses one chunk per rank; any other num_chunks is a ChunkCountError."""
    with pytest.raises(ChunkCountError, match="one chunk per rank"):
        ring(_values(4, (10,), "float32"), num_chunks=num_chunks)


def test_ring_explicit_matching_chunk_count_is_fine():
    """num_chunks equal to the number of ranks is accepted and changes nothing."""
    values = _values(4, (10,), "int32")
    np.testing.assert_array_equal(ring(values, num_chunks=4).values[0], ring(values).values[0])


@pytest.mark.parametrize("root", [-1, 3, 1.0, "0", True])
def test_reduce_to_one_bad_root_raises(root):
    """A root outside 0..n-1 (or not an int) is a RankError."""
    with pytest.raises(RankError, match="root="):
        reduce_to_one(_values(3, (2,), "float32"), root=root)


def test_closed_form_errors():
    """closed_form rejects unknown algorithms, n < 1 and negative or non-finite sizes."""
    with pytest.raises(UnknownAlgorithmError, match="tree"):
        closed_form("tree", 4, 8)
    for bad_n in (0, -2, 2.5, True):
        with pytest.raises(ReplicaCountError):
            closed_form("ring", bad_n, 8)
    for bad_size in (-1, float("nan"), float("inf"), "8"):
        with pytest.raises(InvalidQuantityError):
            closed_form("ring", 4, bad_size)


def test_closed_form_accepts_numpy_integers():
    """A rank count that is a numpy integer (e.g. from np.arange) works like a Python int."""
    assert closed_form("halving_doubling", np.int64(6), 48).steps == 6


@pytest.mark.parametrize("module", ["allreduce", "simulator", "costmodel"])
def test_modules_do_not_import_tensorflow(module):
    """The numpy chapter stands alone: none of these modules imports TensorFlow."""
    import ast
    import pathlib

    import mirrortutor.collectives

    source = (pathlib.Path(mirrortutor.collectives.__file__).parent / f"{module}.py").read_text()
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.ImportFrom)}
    assert "tensorflow" not in imported
