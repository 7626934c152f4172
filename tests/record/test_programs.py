"""Every kind of program TensorFlow accepts gets a complete, honest trace (issue 13).

Each test runs one program twice: under plain ``tf.distribute.MirroredStrategy`` and under
``mt.MirroredStrategy`` recording everything. The results must be equal, bit for bit, and the
trace must hold what the program did: its steps, shards, outputs and reductions, or a
:class:`~mirrortutor.record.records.SkippedRecord` saying why a value was not kept. Warnings are
errors here, so a recording callback that fails ("could not record") fails its test.
"""

from __future__ import annotations

import collections
import contextlib
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from conftest import run_python
from helpers import digits, plain_mirrored, same_bits, train_custom, train_fit

pytestmark = pytest.mark.filterwarnings("error")
MODES = ["eager", "function"]
Meta = collections.namedtuple("Meta", ["index", "weight"])


def local(strategy, value):
    """A program's result as numpy: a list per replica for distributed values."""
    def one(v):
        if isinstance(v, tf.distribute.DistributedValues):
            return [np.asarray(c) for c in strategy.experimental_local_results(v)]
        return np.asarray(v) if isinstance(v, (tf.Tensor, tf.Variable)) else v
    return tf.nest.map_structure(one, value)


def assert_same(a, b) -> None:
    flat_a, flat_b = tf.nest.flatten(a), tf.nest.flatten(b)
    assert len(flat_a) == len(flat_b)
    for x, y in zip(flat_a, flat_b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), (x, y)


def compare(devices, program, mode="eager", n=2, inputs=None):
    """Run ``program(strategy, *inputs(strategy))`` under plain TF and under mt, eagerly or as a
    tf.function (inputs, e.g. a distributed batch, are made eagerly); equal results; mt's trace."""
    results = []
    for strategy in (plain_mirrored(devices[:n]),
                     mt.MirroredStrategy(devices[:n], recording=mt.Recording.everything())):
        run = tf.function(program) if mode == "function" else program
        results.append(local(strategy, run(strategy, *(inputs(strategy) if inputs else ()))))
    assert_same(*results)
    trace = strategy.trace
    assert not [w for w in trace.warnings if "could not record" in w]
    return trace, results[1]


def replica_id():
    return tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)


def first_batch(strategy, n: int = 8, **kwargs):
    """The first global batch of the digits, distributed: Example(index, x, y) of PerReplica."""
    return next(iter(strategy.experimental_distribute_dataset(digits(n).to_tf(n, **kwargs))))


# ---- strategy.run: arguments of every shape -------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_run_with_no_arguments(devices, mode):
    """run(fn) with no args: a recorded step, its per-replica output, and no shards."""
    trace, out = compare(devices, lambda s: s.run(replica_id), mode)
    assert trace.steps_run == 1 and trace.steps == [0]
    assert trace.shards(0) == [] and trace.skipped() == []
    (output,) = trace.outputs(0)
    assert output.name == "output" and [float(v) for v in output.values] == [0.0, 1.0]


@pytest.mark.parametrize("mode", MODES)
def test_run_with_scalar_arguments(devices, mode):
    """run(fn, args=(3.0, tensor)): values every replica shares are not shards; outputs kept."""
    trace, _ = compare(devices, lambda s: s.run(lambda a, b: a * b + replica_id(),
                                               args=(3.0, tf.constant(2.0))), mode)
    assert trace.shards(0) == [] and trace.skipped() == []
    assert [float(v) for v in trace.outputs(0)[0].values] == [6.0, 7.0]


@pytest.mark.parametrize("mode", MODES)
def test_run_with_kwargs_finds_the_index_by_name(devices, mode):
    """run(fn, kwargs=batch._asdict()): the keyword called index gives each replica's examples."""
    def program(s, batch):
        return s.run(lambda index, x, y: tf.reduce_sum(x, axis=1), kwargs=batch._asdict())

    trace, _ = compare(devices, program, mode, inputs=lambda s: (first_batch(s),))
    assert {r: ids.tolist() for r, ids in trace.example_ids(0).items()} == {0: [0, 1, 2, 3],
                                                                          1: [4, 5, 6, 7]}


@pytest.mark.parametrize("mode", MODES)
def test_run_with_nested_dicts_tuples_and_namedtuples(devices, mode):
    """Nested args: the index is found inside a namedtuple; nested outputs are named by path."""
    def program(s, b):
        args = ({"pair": (b.x, b.y), "meta": Meta(index=b.index, weight=2.0)},)

        def fn(d):
            total = tf.reduce_sum(d["pair"][0]) * d["meta"].weight
            return {"total": total, "parts": (tf.cast(d["pair"][1], tf.float32), d["meta"].index)}
        return s.run(fn, args=args)

    trace, out = compare(devices, program, mode, inputs=lambda s: (first_batch(s),))
    assert trace.example_ids(0)[1].tolist() == [4, 5, 6, 7]
    names = [o.name for o in trace.outputs(0)]
    assert names == ["parts/0", "parts/1", "total"]
    np.testing.assert_array_equal(trace.outputs(0)[2].values, out["total"])


def test_labels_first_are_not_taken_for_example_ids(devices):
    """A (labels, x) batch has no field called index: shard sizes only, and example_ids says how
    to add one instead of passing the labels off as example numbers."""
    def program(s):
        data = digits(8)
        ds = tf.data.Dataset.from_tensor_slices((data.y, data.x)).batch(8)
        batch = next(iter(s.experimental_distribute_dataset(ds)))
        return s.run(lambda y, x: tf.reduce_sum(x), args=batch)

    trace, _ = compare(devices, program)
    assert [r.batch_size for r in trace.shards(0)] == [4, 4]
    assert all(r.example_ids is None for r in trace.shards(0))
    with pytest.raises(mt.errors.NotRecordedError, match="field named 'index'.*Example"):
        trace.example_ids(0)
    assert "Examples: the batches have no 'index' field" in trace.summary()


@pytest.mark.parametrize("mode", MODES)
def test_values_from_function_that_are_scalars_are_skipped_with_the_reason(devices, mode):
    """PerReplica scalars from experimental_distribute_values_from_function are not a batch."""
    def program(s):
        v = s.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group) + 10.0))
        return s.run(lambda a: a * 2.0, args=(v,))

    trace, _ = compare(devices, program, mode)
    (skip,) = trace.skipped(0)
    assert (skip.what, skip.name, skip.reason) == ("shards", "args[0]",
                                                   "not a batch: scalar per-replica value")
    assert [float(v) for v in trace.outputs(0)[0].values] == [20.0, 22.0]


def test_values_from_function_that_are_vectors_are_shards_without_ids(devices):
    """PerReplica vectors of different lengths: shard sizes recorded, examples not identified."""
    def program(s):
        v = s.experimental_distribute_values_from_function(
            lambda ctx: tf.range(3 + ctx.replica_id_in_sync_group, dtype=tf.float32))
        return s.run(tf.reduce_sum, args=(v,))

    trace, _ = compare(devices, program)
    assert [r.batch_size for r in trace.shards(0)] == [3, 4]
    assert "not identified" in trace.summary() or "no 'index' field" in trace.summary()


@pytest.mark.parametrize("mode", MODES)
def test_outputs_of_a_previous_run_as_arguments(devices, mode):
    """Feeding one run's PerReplica output to the next run: two steps, nothing lost."""
    def program(s):
        first = s.run(replica_id)
        return s.run(lambda v: v + 1.0, args=(first,))

    trace, _ = compare(devices, program, mode)
    assert trace.steps == [0, 1]
    assert [s.reason for s in trace.skipped(1)] == ["not a batch: scalar per-replica value"]
    assert [float(v) for v in trace.outputs(1)[0].values] == [1.0, 2.0]


# ---- reductions -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_replica_all_reduce_of_a_scalar(devices, mode):
    """ReplicaContext.all_reduce("SUM", scalar): inputs 0, 1 and output 1 on every replica."""
    def program(s):
        return s.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", replica_id()))

    trace, _ = compare(devices, program, mode)
    (rec,) = trace.allreduces(0)
    assert (rec.path, rec.reduce_op, rec.outside) == ("batch_reduce", "SUM", False)
    assert [float(a) for a in rec.inputs[0]] == [0.0, 1.0]
    assert [float(a) for a in rec.outputs[0]] == [1.0, 1.0]


@pytest.mark.parametrize("mode", MODES)
def test_replica_all_reduce_of_a_nested_structure(devices, mode):
    """all_reduce("MEAN", {"a": scalar, "b": [vector, matrix]}): every tensor recorded whole."""
    def program(s):
        def fn():
            r = replica_id()
            return tf.distribute.get_replica_context().all_reduce(
                "MEAN", {"a": r, "b": [tf.range(3.0) * r, tf.fill([2, 2], r + 1.0)]})
        return s.run(fn)

    trace, out = compare(devices, program, mode)
    (rec,) = trace.allreduces(0)
    assert rec.reduce_op == "MEAN" and rec.shapes == [(), (3,), (2, 2)]
    for t in range(3):
        np.testing.assert_allclose(rec.outputs[t][0], np.mean(rec.inputs[t], axis=0))
    np.testing.assert_array_equal(rec.outputs[2][0], out["b"][1][0])


@pytest.mark.parametrize("mode", MODES)
def test_merge_call_reduce(devices, mode):
    """merge_call(strategy.reduce) inside run: one reduce, recorded in the step."""
    def program(s):
        def fn():
            return tf.distribute.get_replica_context().merge_call(
                lambda strategy, v: strategy.reduce("SUM", v, axis=None), args=(replica_id() + 1.0,))
        return s.run(fn)

    trace, _ = compare(devices, program, mode)
    (rec,) = trace.allreduces(0)
    assert rec.path == "reduce" and [float(a) for a in rec.inputs[0]] == [1.0, 2.0]
    assert float(rec.outputs[0][0]) == 3.0


def test_reduce_axis_none_eagerly_is_outside_any_step(devices):
    """An eager strategy.reduce after run is a reduction outside any step, not a step."""
    trace, out = compare(devices, lambda s: s.reduce("SUM", s.run(replica_id), axis=None))
    assert float(out) == 1.0 and trace.steps_run == 1 and trace.allreduces() == []
    (rec,) = trace.outside_reductions()
    assert (rec.outside, rec.step, rec.path) == (True, 0, "reduce")
    assert "1 reduction(s) outside any strategy.run step" in trace.summary()


def test_reduce_in_a_function_belongs_to_its_step(devices):
    """reduce after run in the same tf.function (the custom loop's loss) belongs to that step."""
    trace, _ = compare(devices, lambda s: s.reduce("SUM", s.run(replica_id), axis=None), "function")
    assert [r.path for r in trace.allreduces(0)] == ["reduce"] and trace.outside_reductions() == []


@pytest.mark.parametrize("mode", MODES)
def test_reduce_along_the_batch_of_an_uneven_batch(devices, mode):
    """reduce(axis=0) SUM and MEAN of 7 examples over 4 replicas; TF's inner run is no step."""
    def batch(s):
        ds = tf.data.Dataset.range(7).map(lambda i: tf.cast(i, tf.float32)).batch(7)
        return (next(iter(s.experimental_distribute_dataset(ds))),)

    def program(s, b):
        values = s.run(lambda x: x * 2.0, args=(b,))
        return s.reduce("SUM", values, axis=0), s.reduce("MEAN", values, axis=0)

    trace, (total, mean) = compare(devices, program, mode, n=4, inputs=batch)
    assert float(total) == 42.0 and float(mean) == pytest.approx(6.0)
    assert trace.steps_run == 1 and trace.steps == [0]
    assert [r.batch_size for r in trace.shards(0)] == [2, 2, 2, 1]
    reductions = trace.allreduces(0) + trace.outside_reductions()
    assert {r.reduce_op for r in reductions} == {"SUM"} and len(reductions) >= 2


@pytest.mark.parametrize("mode", MODES)
def test_gather_of_uneven_shards(devices, mode):
    """strategy.gather(axis=0) of shards of 2 and 1 rows: recorded as a gather of 3 rows."""
    def program(s):
        v = s.experimental_distribute_values_from_function(
            lambda ctx: tf.ones([2 - ctx.replica_id_in_sync_group, 3]) * tf.cast(
                ctx.replica_id_in_sync_group + 1, tf.float32))
        return s.gather(s.run(tf.identity, args=(v,)), axis=0)

    trace, out = compare(devices, program, mode)
    gathers = [r for r in trace.allreduces() + trace.outside_reductions() if r.path == "gather"]
    (rec,) = gathers
    assert rec.reduce_op == "GATHER" and [a.shape for a in rec.inputs[0]] == [(2, 3), (1, 3)]
    np.testing.assert_array_equal(rec.outputs[0][0], out)


@pytest.mark.parametrize("mode", MODES)
def test_replica_all_gather(devices, mode):
    """ReplicaContext.all_gather inside run is recorded as a gather in the step."""
    def program(s):
        return s.run(lambda: tf.distribute.get_replica_context().all_gather(
            tf.fill([2], replica_id()), axis=0))

    trace, _ = compare(devices, program, mode)
    (rec,) = [r for r in trace.allreduces(0) if r.path == "gather"]
    np.testing.assert_array_equal(rec.outputs[0][0], [0.0, 0.0, 1.0, 1.0])


def test_extended_update_reduce_to_and_batch_reduce_to(devices):
    """extended.update, reduce_to (to a variable) and batch_reduce_to (to a variable and a
    device): the same values as TF, every reduction named by its destination."""
    def program(s):
        with s.scope():
            v = tf.Variable(1.0, name="v")
            w = tf.Variable([1.0, 2.0], name="w")
        s.extended.update(v, lambda var, x: var.assign_add(x), args=(tf.constant(2.0),))
        per_replica = s.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group) + 1.0))
        one = s.extended.reduce_to("SUM", per_replica, v)
        two = s.extended.batch_reduce_to("MEAN", [(per_replica, v), (per_replica, "/cpu:0")])
        return v, w, one, two

    trace, out = compare(devices, program)
    assert [float(x) for x in out[0]] == [3.0, 3.0]
    records = trace.outside_reductions()
    assert [(r.path, r.reduce_op) for r in records] == [("reduce", "SUM"), ("batch_reduce", "MEAN")]
    assert records[0].names == ["v"] and records[1].names == ["v", "value 1"]
    assert float(records[0].outputs[0][0]) == 3.0 and float(records[1].outputs[1][0]) == 1.5


def test_sparse_gradient_is_skipped_with_the_reason_and_the_dense_one_kept(devices):
    """all_reduce of [IndexedSlices (a gathered table's gradient), dense gradient]: the sparse
    value is recorded as skipped, with why; the dense one is recorded whole."""
    def variables(s):
        with s.scope():
            return tf.Variable(tf.ones([10, 3]), name="table"), tf.Variable(tf.ones([3]), name="w")

    def program(s, table, w):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.gather(table, [rid, rid + 2]) * w) * tf.cast(rid + 1,
                                                                                    tf.float32)
            grads = tape.gradient(loss, [table, w])
            assert isinstance(grads[0], tf.IndexedSlices)
            sparse, dense = tf.distribute.get_replica_context().all_reduce("SUM", grads)
            return tf.convert_to_tensor(sparse), dense
        return s.run(fn)

    trace, _ = compare(devices, program, "function", inputs=variables)
    (skip,) = trace.skipped(0)
    assert skip.what == "all-reduce" and skip.reason.startswith("sparse value (IndexedSlices")
    (rec,) = trace.allreduces(0)
    # w's gradient on replica r: (r + 1) × two gathered rows of ones = 2, then 4; summed: 6
    assert rec.names == ["value 1"] and [a.tolist() for a in rec.outputs[0]] == [[6.0] * 3] * 2


# ---- variables and dtypes ---------------------------------------------------------------------------
def test_variable_created_inside_a_function_in_scope(devices):
    """A variable made on the first trace of a tf.function, in scope: listed and sync-checked."""
    def program(s):
        holder = []

        @tf.function
        def step():
            if not holder:
                with s.scope():
                    holder.append(tf.Variable(1.0, name="made_in_function"))
            return s.run(lambda: holder[0].assign_add(1.0))

        step()
        step()
        return holder[0]

    trace, out = compare(devices, program)
    assert [float(x) for x in out] == [3.0, 3.0]
    assert [v.name for v in trace.variables] == ["made_in_function"]
    assert [r.max_abs_diff for r in trace.sync()] == [0.0, 0.0]


@pytest.mark.parametrize("mode", MODES)
def test_sync_on_read_variable(devices, mode):
    """An ON_READ/SUM counter: each replica's own copy, summed when read; never flagged."""
    def counter(s):
        with s.scope():
            return (tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                                aggregation=tf.VariableAggregation.SUM, name="counter"),)

    def program(s, counter):
        s.run(lambda: counter.assign_add(replica_id() + 1.0))
        return s.experimental_local_results(counter), counter.read_value()

    trace, (copies, total) = compare(devices, program, mode, inputs=counter)
    assert [float(c) for c in copies] == [1.0, 2.0] and float(total) == 3.0
    (var,) = trace.variables
    assert (var.kind, var.synchronization) == ("SyncOnReadVariable", "ON_READ")
    assert trace.sync() == [] and trace.warnings == []


@pytest.mark.parametrize("dtype", ["int32", "int64", "float16"])
def test_integer_and_half_precision_all_reduce(devices, dtype):
    """all_reduce of int32, int64 and float16 values: recorded in their own dtype, exactly."""
    def program(s):
        return s.run(lambda: tf.distribute.get_replica_context().all_reduce(
            "SUM", tf.cast(tf.range(3), dtype) + tf.cast(replica_id(), dtype)))

    trace, out = compare(devices, program, "function")
    (rec,) = trace.allreduces(0)
    assert [a.dtype.name for a in rec.inputs[0]] == [dtype, dtype]
    np.testing.assert_array_equal(rec.outputs[0][0], out[0])
    assert rec.outputs[0][0].tolist() == [1, 3, 5]


def test_half_precision_mirrored_variable(devices):
    """A float16 MEAN variable assigned per replica: recorded as float16, copies in sync."""
    def program(s):
        with s.scope():
            v = tf.Variable(tf.constant(1.0, tf.float16), aggregation=tf.VariableAggregation.MEAN)
        s.run(lambda: v.assign(tf.cast(replica_id(), tf.float16)))
        return v

    trace, out = compare(devices, program)
    assert [float(x) for x in out] == [0.5, 0.5] and trace.variables[0].dtype == "float16"
    (rec,) = trace.allreduces(0)
    assert rec.inputs[0][0].dtype == np.float16 and trace.max_sync_diff() == 0.0


# ---- loops and whole training programs --------------------------------------------------------------
def test_steps_in_a_function_loop_with_scalar_outputs(devices):
    """A tf.range loop of runs over an iterator: one step per run, shards and reductions in each."""
    def program(s, iterator):
        total = tf.constant(0.0)
        for _ in tf.range(3):
            total += s.reduce("SUM", s.run(lambda i, x, y: tf.reduce_sum(x), args=next(iterator)),
                              axis=None)
        return total

    trace, _ = compare(devices, program, "function", inputs=lambda s: (
        iter(s.experimental_distribute_dataset(digits(48).to_tf(16))),))
    assert trace.steps == [0, 1, 2] and trace.outside_reductions() == []
    assert [len(trace.allreduces(k)) for k in range(3)] == [1, 1, 1]
    ids = np.concatenate([np.concatenate(list(trace.example_ids(k).values())) for k in range(3)])
    assert ids.tolist() == list(range(48))


def test_xla_compiled_steps_are_counted_and_the_gap_is_explained(devices):
    """Under jit_compile=True no callback can run: the steps are counted, one warning says why
    they are missing, and the summary says the rule kept fewer steps than it should have."""
    results = []
    for strategy in (plain_mirrored(devices[:2]), mt.MirroredStrategy(devices[:2])):
        step = tf.function(lambda x: strategy.run(lambda v: v * 2.0, args=(x,)), jit_compile=True)
        with pytest.warns(UserWarning, match="cannot record inside XLA") if isinstance(
                strategy, mt.MirroredStrategy) else contextlib.nullcontext():
            results.append([local(strategy, step(tf.constant([1.0, 2.0]))) for _ in range(3)])
    assert_same(*results)
    trace = strategy.trace
    assert trace.steps_run == 3 and trace.steps == [] and len(trace.warnings) == 1
    assert "That rule keeps 3 of 3 steps, but 0 were recorded" in trace.summary()


def test_custom_training_loop(devices):
    """The textbook custom loop: bit-identical weights, gradients per replica, one step per batch."""
    data = digits(128)
    plain_w, plain_l = train_custom(plain_mirrored(devices[:2]), data, epochs=1)
    s = mt.MirroredStrategy(devices[:2], recording=mt.Recording.everything())
    our_w, our_l = train_custom(s, data, epochs=1)
    assert same_bits(plain_w, our_w) and plain_l == our_l
    assert s.trace.steps_run == len(s.trace.steps) == 2 and s.trace.skipped() == []
    assert len(s.trace.gradients(step=1)) == 4 * 2


def test_keras_fit_counts_steps_and_reductions_apart(devices):
    """Keras fit: one step per batch (no step -1), Keras's own eager reductions listed apart,
    shard sizes recorded and the examples found by their rows."""
    data = digits(256)
    plain_w, plain_h = train_fit(plain_mirrored(devices[:4]), data, epochs=2)
    s = mt.MirroredStrategy(devices[:4])
    our_w, our_h = train_fit(s, data, epochs=2)
    assert same_bits(plain_w, our_w) and plain_h == our_h
    trace = s.trace
    assert trace.steps_run == 8 and trace.steps == list(range(8))
    assert trace.outside_count == len(trace.outside_reductions()) > 0
    assert all(r.outside and -1 <= r.step < 8 for r in trace.outside_reductions())
    ids = trace.example_ids(5, dataset=data)
    np.testing.assert_array_equal(np.concatenate([ids[r] for r in range(4)]), np.arange(64, 128))
    assert trace.summary().startswith("8 step(s) run, 8 recorded: the first 20 steps")


def test_multi_worker_strategy_programs_in_a_fresh_process():
    """mt.MultiWorkerMirroredStrategy (one worker, 2 replicas) runs the same kinds of programs as
    plain MirroredStrategy over the same devices, with equal results and a complete trace."""
    out = run_python("""
        import json, warnings
        warnings.simplefilter("error")
        import mirrortutor as mt
        import numpy as np, tensorflow as tf
        from mirrortutor.record.tf_internals.hooks import plain_mirrored_strategy
        ours = mt.MultiWorkerMirroredStrategy(replicas_per_worker=2, recording=mt.Recording.everything())
        plain = plain_mirrored_strategy(list(ours.extended.worker_devices))

        def program(s):
            rid = lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
            batch = next(iter(s.experimental_distribute_dataset(mt.data.digits().take(8).to_tf(8))))
            step = tf.function(lambda b: s.run(lambda index, x, y: tf.distribute.get_replica_context()
                                               .all_reduce("SUM", tf.reduce_sum(x)), args=b))
            first = step(batch)
            scalar = s.run(lambda v: v * 2.0, args=(s.run(rid),))
            total = s.reduce("SUM", scalar, axis=None)
            return [float(x) for x in s.experimental_local_results(first)] + [float(total)]

        expected, got = program(plain), program(ours)
        t = ours.trace
        print(json.dumps({"same": expected == got, "steps": t.steps, "run": t.steps_run,
                          "ids": {str(k): v.tolist() for k, v in t.example_ids(0).items()},
                          "skipped": [s.reason for s in t.skipped()],
                          "outside": len(t.outside_reductions()), "warnings": t.warnings}))
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["same"] and report["warnings"] == []
    assert report["run"] == 3 and report["steps"] == [0, 1, 2]
    assert report["ids"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    assert report["skipped"] == ["not a batch: scalar per-replica value"]
    assert report["outside"] == 1
