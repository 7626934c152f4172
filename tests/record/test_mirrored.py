"""mt.MirroredStrategy: a drop-in for TF's, recording a trace that never changes a number."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from helpers import digits, plain_mirrored, same_bits, train_custom, train_fit

REPLICAS = [1, 2, 4, 8]


def test_is_a_tensorflow_mirrored_strategy(devices):
    """It is an instance of tf.distribute.MirroredStrategy and takes the same arguments."""
    s = mt.MirroredStrategy(devices[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert isinstance(s, tf.distribute.MirroredStrategy)
    assert s.num_replicas_in_sync == 2
    assert list(s.extended.worker_devices) == [f"/job:localhost/replica:0/task:0/device:CPU:{i}"
                                               for i in range(2)]


@pytest.mark.parametrize("n", REPLICAS)
def test_custom_loop_is_bit_identical_to_plain_tf(devices, n):
    """A custom loop gives bit-identical weights and losses under mt's strategy and TF's."""
    data = digits()
    plain_w, plain_l = train_custom(plain_mirrored(devices[:n]), data)
    ours = mt.MirroredStrategy(devices[:n], recording=mt.Recording.everything())
    our_w, our_l = train_custom(ours, data)
    assert same_bits(plain_w, our_w)
    assert plain_l == our_l
    assert ours.trace.steps_run == 8 and len(ours.trace.steps) == 8  # it did record


@pytest.mark.parametrize("n", REPLICAS)
def test_keras_fit_is_bit_identical_to_plain_tf(devices, n):
    """Keras fit gives bit-identical weights and history under mt's strategy and TF's."""
    data = digits()
    plain_w, plain_h = train_fit(plain_mirrored(devices[:n]), data)
    ours = mt.MirroredStrategy(devices[:n], recording=mt.Recording.everything())
    our_w, our_h = train_fit(ours, data)
    assert same_bits(plain_w, our_w)
    assert plain_h == our_h
    assert ours.trace.steps_run == 8 and ours.trace.gradients(step=0)


def test_strategies_over_different_device_counts_share_a_process(devices):
    """2, then 3, then 2 replicas again in one process: every all-reduce works when each strategy
    is made after the one visible line, mt.new_collective_keys() (without it TF's own strategy and
    mt's fail alike: tests/record/test_collective_keys.py)."""
    for n in [2, 3, 2, 5]:
        mt.new_collective_keys()
        s = mt.MirroredStrategy(devices[:n])

        @tf.function
        def total():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce("SUM", tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0)

        result = s.experimental_local_results(s.run(total))
        assert [float(r) for r in result] == [n * (n + 1) / 2] * n


def test_shards_partition_each_global_batch(devices):
    """Each step's per-replica example ids are disjoint, consecutive, and cover the global batch."""
    s = mt.MirroredStrategy(devices[:4])
    data = mt.data.digits().take(250)  # batches of 64, 64, 64 and a last one of 58
    dist = s.experimental_distribute_dataset(data.to_tf(64))
    batches = list(data.to_tf(64))

    @tf.function
    def step(batch):
        return s.run(lambda i, x, y: tf.shape(i)[0], args=batch)

    for b in dist:
        step(b)
    for k, batch in enumerate(batches):
        ids = s.trace.example_ids(k)
        assert sorted(ids) == [0, 1, 2, 3]
        np.testing.assert_array_equal(np.concatenate([ids[r] for r in range(4)]), batch[0].numpy())
    assert [r.batch_size for r in s.trace.shards(0)] == [16, 16, 16, 16]
    assert [r.batch_size for r in s.trace.shards(3)] == [15, 15, 15, 13]
    assert [r.device[-5:] for r in s.trace.shards(3)] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def test_fit_shards_are_recognised_by_their_rows(devices):
    """With (x, y) data, as fit takes, the trace finds each replica's examples from the dataset."""
    s = mt.MirroredStrategy(devices[:4])
    data = digits()
    train_fit(s, data, epochs=1)
    ids = s.trace.example_ids(1, dataset=data)
    np.testing.assert_array_equal(np.concatenate([ids[r] for r in range(4)]), np.arange(64, 128))


def test_allreduce_outputs_are_the_sum_of_recorded_inputs(devices):
    """Every recorded all-reduce output equals the SUM (or MEAN) of its recorded inputs."""
    s = mt.MirroredStrategy(devices[:4], recording=mt.Recording.everything())
    train_custom(s, digits(), epochs=1)
    records = s.trace.allreduces()
    assert {r.implementation for r in records} >= {"CollectiveAllReduce (RING)"}
    for rec in records:
        for ins, outs in zip(rec.inputs, rec.outputs):
            expected = np.sum(ins, axis=0) / (len(ins) if rec.reduce_op == "MEAN" else 1)
            for out in outs:
                np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)


def test_gradients_are_the_allreduce_inputs_named_by_variable(devices):
    """trace.gradients gives each replica's local gradient per variable, summed into the output."""
    s = mt.MirroredStrategy(devices[:2], recording=mt.Recording.everything())
    train_custom(s, digits(), epochs=1)
    grads = s.trace.gradients(step=0)
    names = [v.name for v in s.trace.variables if v.trainable]
    assert [g.variable for g in grads] == [n for n in names for _ in range(2)]
    kernel = [g for g in grads if g.variable == names[0]]
    total = kernel[0].value + kernel[1].value
    assert kernel[0].reduced_norm == pytest.approx(np.linalg.norm(total), rel=1e-5)
    assert not np.array_equal(kernel[0].value, kernel[1].value), "replicas saw different data"


def test_variables_are_recorded_with_one_component_per_device(devices):
    """Each MirroredVariable is listed with its devices, aggregation and per-replica values."""
    s = mt.MirroredStrategy(devices[:3])
    with s.scope():
        tf.Variable(1.0, name="w", aggregation=tf.VariableAggregation.MEAN)
        tf.Variable(0.0, name="c", synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.SUM)
    w, c = s.trace.variables
    assert (w.kind, w.synchronization, w.aggregation) == ("MirroredVariable", "ON_WRITE", "MEAN")
    assert (c.kind, c.synchronization, c.aggregation) == ("SyncOnReadVariable", "ON_READ", "SUM")
    assert [d[-5:] for d in w.devices] == ["CPU:0", "CPU:1", "CPU:2"]
    assert [float(v) for v in w.initial_values] == [1.0, 1.0, 1.0]


def test_mean_assign_matches_tensorflow_expectation(devices):
    """MEAN assign(replica_id) from 1.0 gives 0.5 on 2 replicas, recorded as a reduce."""
    s = mt.MirroredStrategy(devices[:2])
    with s.scope():
        v = tf.Variable(1.0, aggregation=tf.VariableAggregation.MEAN)
    s.run(lambda: v.assign(tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group,
                                   tf.float32)))
    assert [float(c) for c in s.experimental_local_results(v)] == [0.5, 0.5]
    (rec,) = s.trace.allreduces(step=0)
    assert (rec.path, rec.reduce_op, rec.implementation) == ("reduce", "MEAN", "ReductionToOneDevice")
    shots = s.snapshot("after assign")
    assert [float(x) for x in shots[0].values] == [0.5, 0.5]


def test_sync_check_is_zero_after_training(devices):
    """After every recorded step, each variable's copies agree exactly across replicas."""
    s = mt.MirroredStrategy(devices[:4])
    train_custom(s, digits(), epochs=1)
    assert len(s.trace.sync()) == 4 * 4  # 4 steps x 4 trainable variables
    assert s.trace.max_sync_diff() == 0.0


def test_sync_check_sees_replicas_drift_apart(devices):
    """A variable written differently per replica (aggregation NONE, per-component) shows up."""
    s = mt.MirroredStrategy(devices[:2])
    with s.scope():
        v = tf.Variable([0.0, 0.0], trainable=True)
    comps = s.experimental_local_results(v)
    comps[1].assign([0.0, 3.0])  # write one replica's copy only: they now disagree
    with pytest.warns(UserWarning, match="differ by up to 3"):
        s.run(lambda: tf.constant(0.0))
    assert s.trace.max_sync_diff() == 3.0


def test_assign_with_aggregation_none_drifts_and_is_flagged(devices):
    """Replicas assigning different values to a NONE-aggregation variable diverge; mt says so."""
    s = mt.MirroredStrategy(devices[:4])
    with s.scope():
        w = tf.Variable(1.0)

    def replica_fn():
        w.assign(tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))

    with pytest.warns(UserWarning, match="aggregation is NONE"):
        tf.function(lambda: s.run(replica_fn))()
    assert [float(c) for c in s.experimental_local_results(w)] == [0.0, 1.0, 2.0, 3.0]
    assert s.trace.max_sync_diff() == 3.0


def test_default_recording_is_bounded(devices):
    """A long run keeps only the first steps and the latest samples: memory does not grow."""
    policy = mt.Recording(first_steps=5, every=10, keep_last=3)
    s = mt.MirroredStrategy(devices[:2], recording=policy)

    @tf.function
    def step():
        return s.run(lambda: tf.ones([4]))

    for _ in range(200):
        step()
    assert s.trace.steps_run == 200
    assert s.trace.steps == [0, 1, 2, 3, 4, 170, 180, 190]


def test_eager_run_records_like_a_function(devices):
    """strategy.run outside tf.function records shards and outputs just the same."""
    s = mt.MirroredStrategy(devices[:2])
    batch = next(iter(s.experimental_distribute_dataset(mt.data.digits().take(8).to_tf(8))))
    s.run(lambda i, x, y: tf.reduce_sum(x), args=batch)
    assert [list(v) for v in s.trace.example_ids(0).values()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    (out,) = s.trace.outputs(0)
    assert len(out.values) == 2 and out.values[0].shape == ()


def test_model_outside_scope_gets_a_clear_error(devices):
    """A model built outside strategy.scope() raises OutsideScopeError with the fix, not a bare assert."""
    s = mt.MirroredStrategy(devices[:2])
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    with s.scope():
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        with pytest.raises(mt.OutsideScopeError, match=r"inside `with strategy.scope\(\):`"):
            model.fit(digits().to_tf(64, with_index=False), epochs=1, verbose=0)
    # nothing lost: the same strategy still trains a model built the right way
    train_fit(s, digits(), epochs=1)


def test_fit_with_uneven_batch_split_gets_a_clear_error(devices):
    """fit with a global batch of 64 over 3 replicas raises BatchSplitError saying what to change:
    the global batch size, and at least one full global batch (a shorter dataset is cut by the
    global batch size under OFF or from files, so a multiple of 3 alone does not help there)."""
    s = mt.MirroredStrategy(devices[:3])
    with pytest.raises(mt.BatchSplitError, match="make the global batch size a multiple of 3, "
                                                 "and give the call at least one full global batch"):
        train_fit(s, digits(), epochs=1)


def test_fit_trains_through_an_uneven_last_batch_when_the_first_is_even(devices):
    """Keras 3 fit reduces only its first batch with axis=None (_maybe_symbolic_build): 250
    examples in batches of 64 over 4 replicas (last batch 15/15/15/13) train all 4 steps."""
    s = mt.MirroredStrategy(devices[:4])
    with s.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
        model.compile(optimizer="sgd",
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = digits(250)
    model.fit(data.to_tf(64, with_index=False), epochs=1, verbose=0, shuffle=False)
    assert int(model.optimizer.iterations.numpy()) == 4
    last = s.trace.example_ids(3, dataset=data)
    assert [len(last[r]) for r in sorted(last)] == [15, 15, 15, 13]


def test_already_reduced_gradients_are_flagged(devices):
    """Passing all-reduced gradients to a Keras optimizer (applied N times) is flagged."""
    s = mt.MirroredStrategy(devices[:2])
    data = digits(64)
    with s.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
        opt = keras.optimizers.SGD(0.1)

    @tf.function
    def step(batch):
        def replica(i, x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x) ** 2) / 2
            grads = tape.gradient(loss, model.trainable_variables)
            reduced = tf.distribute.get_replica_context().all_reduce("SUM", grads)
            opt.apply_gradients(zip(reduced, model.trainable_variables))  # the mistake
        s.run(replica, args=batch)

    with pytest.warns(UserWarning, match="identical values into a SUM all-reduce"):
        for b in s.experimental_distribute_dataset(data.to_tf(64)):
            step(b)
    assert len(s.trace.warnings) == 1


def test_outputs_of_different_shapes_per_replica_are_recorded(devices):
    """Per-replica outputs of different lengths (an uneven last batch) are kept, one per replica."""
    s = mt.MirroredStrategy(devices[:4])
    data = mt.data.digits().take(58)  # one global batch of 58: shards of 15, 15, 15, 13
    batch = next(iter(s.experimental_distribute_dataset(data.to_tf(58))))
    tf.function(lambda b: s.run(lambda i, x, y: tf.cast(i, tf.float32), args=b))(batch)
    (out,) = s.trace.outputs(0)
    assert [len(v) for v in out.values] == [15, 15, 15, 13]


def test_distribute_datasets_from_function_is_recorded(devices):
    """Datasets built per replica by distribute_datasets_from_function are traced like the rest."""
    s = mt.MirroredStrategy(devices[:2])
    data = mt.data.digits().take(32)

    def dataset_fn(ctx):
        per_replica = ctx.get_per_replica_batch_size(16)
        return data.to_tf().shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(per_replica)

    dist = s.distribute_datasets_from_function(dataset_fn)
    step = tf.function(lambda b: s.run(lambda i, x, y: tf.reduce_sum(x), args=b))
    for b in dist:
        step(b)
    assert [r.batch_size for r in s.trace.shards(0)] == [8, 8]
    seen = np.concatenate([np.concatenate(list(s.trace.example_ids(k).values())) for k in s.trace.steps])
    assert sorted(seen.tolist()) == list(range(32))


def test_a_replica_with_an_empty_shard_is_recorded(devices):
    """A last batch smaller than the replica count leaves some replicas empty; recording copes."""
    s = mt.MirroredStrategy(devices[:4])
    data = mt.data.digits().take(2)  # 2 examples over 4 replicas
    batch = next(iter(s.experimental_distribute_dataset(data.to_tf(2, with_index=False))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a recording failure would warn: make it fail the test
        tf.function(lambda b: s.run(lambda x, y: tf.reduce_sum(x), args=b))(batch)
    assert [r.batch_size for r in s.trace.shards(0)] == [1, 1, 0, 0]


def test_hierarchical_copy_with_odd_replicas_is_flagged(devices):
    """HierarchicalCopyAllReduce over an odd replica count of 3 or more (wrong sums in TF 2.21)
    gets a warning that names the sums it gets wrong (in a step) and those it does not (to a CPU,
    int32); an even count, and one replica (which TF never hands to it), get none and sum right."""
    with pytest.warns(UserWarning, match=r"odd number of replicas.*all-reduce in a step.*"
                                         r"int32 values, and reduces to a CPU"):
        mt.MirroredStrategy(devices[:3], cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mt.MirroredStrategy(devices[:4], cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
        # one replica is odd too, but CrossDeviceOps returns it before the implementation runs
        one = mt.MirroredStrategy(devices[:1],
                                  cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())

        @tf.function
        def step():
            return one.run(lambda: tf.distribute.get_replica_context().all_reduce(
                "SUM", tf.constant([7.0])))

        total = step()
    assert one.experimental_local_results(total)[0].numpy().tolist() == [7.0]


def test_recording_runs_inside_a_graph_loop(devices):
    """Several strategy.run calls inside one tf.function loop (as steps_per_execution does)."""
    s = mt.MirroredStrategy(devices[:2])
    batches = iter(s.experimental_distribute_dataset(mt.data.digits().take(64).to_tf(16)))

    @tf.function
    def several_steps(iterator):
        total = tf.constant(0.0)
        for _ in tf.range(3):
            per_replica = s.run(lambda i, x, y: tf.reduce_sum(x), args=next(iterator))
            total += s.reduce("SUM", per_replica, axis=None)
        return total

    several_steps(batches)
    assert s.trace.steps_run == 3
    assert [len(s.trace.shards(k)) for k in range(3)] == [2, 2, 2]
    ids = np.concatenate([np.concatenate(list(s.trace.example_ids(k).values())) for k in range(3)])
    assert ids.tolist() == list(range(48))


def _traced_train_step(strategy, layers: int):
    """A custom-loop train step of an MLP with `layers` Dense layers, and one batch for it."""
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,))] +
                                 [keras.layers.Dense(16, activation="relu") for _ in range(layers)])
        optimizer = keras.optimizers.SGD(0.1)
    batch = next(iter(strategy.experimental_distribute_dataset(digits(64).to_tf(32))))

    @tf.function
    def step(batch):
        def replica_step(index, x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x, training=True)) / strategy.num_replicas_in_sync
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    return step, batch


@pytest.mark.parametrize("layers", [1, 4])
def test_skipped_steps_pass_one_unlowered_gate_per_device(devices, layers):
    """However many tensors a step records, the graph holds one functional Case gate per device
    for the run, and one on the host for the reduce after it (each replica's loss joins the
    host's part: a scalar handed between CPUs costs less than a Case call): no Switch per
    recorded tensor; the run's gates wait for the updates, not for each other."""
    s = mt.MirroredStrategy(devices[:4])
    step, batch = _traced_train_step(s, layers)
    graph = step.get_concrete_function(batch).graph
    ops = graph.get_operations()
    gates = [op for op in ops if op.type in ("Case", "StatelessCase")]
    assert not [op for op in ops if op.type in ("If", "StatelessIf", "Switch", "Merge")]
    assert len(gates) == 4 + 1
    assert all(op.get_attr("_lower_using_switch_merge") is False for op in gates)
    assert sorted({tf.DeviceSpec.from_string(op.device).device_index for op in gates}) == [0, 1, 2, 3]
    run_gates = gates[:4]
    for gate in run_gates:  # ordered after the updates (ACD), never after another replica's gate
        assert not [c for c in gate.control_inputs if c.type in ("Case", "Identity")]
    recorded_inputs = sum(len(op.inputs) for op in gates)
    assert recorded_inputs > 4 * 2 * layers  # each gate holds many tensors: grads, outputs, copies


def test_recording_keeps_the_order_of_the_program(devices):
    """Callbacks of one step arrive in program order: the gradients' all-reduce inside the run,
    then the loss's reduce after it, on every recorded step."""
    s = mt.MirroredStrategy(devices[:4], recording=mt.Recording.everything())
    step, batch = _traced_train_step(s, 2)
    for _ in range(6):
        step(batch)
    for k in range(6):
        records = s.trace.allreduces(step=k)
        assert [r.path for r in records] == ["batch_reduce", "reduce"]
        assert [r.call for r in records] == [0, 1]
        assert len(records[0].names) == 4  # two kernels and two biases, reduced together


def test_reduce_to_refuses_a_mirrored_sum_as_tensorflow_does(devices):
    """TF's MirroredExtended._reduce_to asserts a SUM is not of a mirrored value; the drop-in's
    copy of that method keeps the assert, so both fail the same way, and both devices agree on
    the MEAN shortcut (the mirrored value itself)."""
    outcomes = []
    for strategy in (plain_mirrored(devices[:2]), mt.MirroredStrategy(devices[:2])):
        with strategy.scope():
            v = tf.Variable(1.0)
        mean = strategy.extended.reduce_to(tf.distribute.ReduceOp.MEAN, v, v)
        with pytest.raises(AssertionError):
            strategy.extended.reduce_to(tf.distribute.ReduceOp.SUM, v, v)
        outcomes.append(mean is v)
    assert outcomes == [True, True]
