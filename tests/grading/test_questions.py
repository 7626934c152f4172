"""The judges' rules are the real ones: each is checked against TensorFlow or the cost model.

A judge computes what it expects from the rule being taught (the batch split, staleness, the ps
placement, the cost model's speed-ups); these tests check each rule against what TensorFlow or
the package's own models really do, so a judge can never mark a right answer wrong.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from mirrortutor.grading import questions
from mirrortutor.grading import answers
from mirrortutor.grading.checks import QUESTIONS, load_questions, verdict
from mirrortutor.grading import release
from mirrortutor.grading.questions import ch02, ch05, ch06, ch07, ch08, ch09

from exercise_keys import ROOT, key


def test_each_chapter_has_its_own_questions_module():
    """q<N>.x is registered by questions/ch<NN>.py and practises the chapter-NN notebook (or its
    lettered second part, NNb_…); every chapter from 01 on has one."""
    load_questions()
    chapters = sorted({p.name[:2] for p in (ROOT / "notebooks").glob("*.ipynb")} - {"00"})
    stems = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert [m.__name__.rsplit(".", 1)[1] for m in questions.CHAPTERS] == [f"ch{n}" for n in chapters]
    for q in QUESTIONS.values():
        n = int(q.id[1:].split(".")[0])
        assert q.judge.__module__ == f"mirrortutor.grading.questions.ch{n:02d}", q.id
        assert q.chapter in stems and q.chapter.startswith((f"{n:02d}_", f"{n:02d}b_")), q.id


def test_loading_every_question_imports_no_tensorflow():
    """mt.check's questions load in a fresh Python without TensorFlow, plotly or ipywidgets."""
    from conftest import run_python

    result = run_python("""
        import sys
        from mirrortutor.grading.checks import check, load_questions
        load_questions()
        check("q1.3", 11.0)
        print(sorted(m for m in ("tensorflow", "plotly", "ipywidgets") if m in sys.modules))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("n", [3, 4, 8])
def test_the_batch_split_rule_is_tensorflows(devices, n):
    """ch02.tf_split agrees with experimental_distribute_dataset, uneven batches included."""
    strategy = mt.MirroredStrategy(devices[:n])
    for global_batch in (64, 58, 50, 13, 5):
        batch = next(iter(strategy.experimental_distribute_dataset(
            tf.data.Dataset.range(global_batch).batch(global_batch))))
        sizes = [int(t.shape[0]) for t in strategy.experimental_local_results(batch)]
        assert sizes == ch02.tf_split(global_batch, n)


def test_the_fit_rule_is_keras(devices):
    """q2.2's fit_trains matches Keras 3 fit on 250 examples over 3 replicas: a batch of 60 (last
    batch 10, cut 4/4/2) trains; 300 (one batch of 250, cut 84/84/82) fails in the first-batch build."""
    import keras

    data = mt.data.load("digits").take(ch02.FIT_EXAMPLES)
    for global_batch in (60, 300):
        strategy = mt.MirroredStrategy(devices[:ch02.FIT_REPLICAS])
        with strategy.scope():
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
            model.compile(optimizer="sgd",
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        try:
            model.fit(data.to_tf(global_batch, with_index=False), epochs=1, verbose=0, shuffle=False)
            trained = True
        except mt.BatchSplitError:
            trained = False
        assert trained == ch02.fit_trains(global_batch), global_batch
    assert [b for b in ch02.FIT_CHOICES if ch02.fit_trains(b)] == [60, 66]


def test_the_ring_bytes_rule_is_the_simulators():
    """q4.3's reference: 2·S minus chunks (r + 1) and (r + 2) mod n, the simulator's count, on the
    public and the hidden cases."""
    import numpy as np

    from mirrortutor.grading.questions import ch04

    for n, count in [*ch04.BYTE_CASES, *release.hidden_inputs(key("04"))["q4.3"]]:
        sizes = [4 * len(c) for c in np.array_split(np.zeros(count), n)]
        rule = [2 * sum(sizes) - sizes[(r + 1) % n] - sizes[(r + 2) % n] for r in range(n)]
        assert ch04.ring_sent(n, count) == rule, (n, count)


def test_the_staleness_rule_is_version_applied_minus_version_read():
    """q7.1's reference counts staleness as chapter 07 does: updates applied in between."""
    for reads, applies in ch07.TIMELINES:
        read_version = [sum(1 for t in applies if t < r) for r in reads]  # updates before the read
        applied_version = list(range(len(applies)))  # updates are logged in the order applied
        assert ch07.staleness_of(reads, applies) == [
            a - r for a, r in zip(applied_version, read_version)]


def _ps_log(slow_steps: int, slow_staleness: int) -> list[dict]:
    """60 functions as strategy.trace.functions hands them in: workers 0 and 2 share the fast
    steps (staleness 0 or 1), worker 1 runs ``slow_steps`` of them, each ``slow_staleness`` stale."""
    rows, version = [], 0
    for i in range(60):
        worker = 1 if i < slow_steps else (0, 2)[i % 2]
        stale = slow_staleness if worker == 1 else i % 2
        version += 1
        rows.append({"type": "ScheduledRecord", "schedule": i, "function": "step_fn",
                     "worker": worker, "started": 0.0, "ended": 0.0,
                     "version_read": version - 1 - stale, "version_written": version})
    return rows


def test_the_ps_loop_judge_reads_the_log_and_the_losses():
    """q7.4: right for a log of 60 steps with worker 1 a straggler and falling losses; each slip
    (steps missing, a loss per step missing, losses not falling, no straggler, a straggler whose
    gradients were not the stalest) gets its own reason."""
    load_questions()

    def judge(answer):
        right, line = verdict(QUESTIONS["q7.4"], answer, [])
        return None if right else line

    falling = [2.0 - i / 60 for i in range(60)]
    assert judge([_ps_log(5, 8), falling]) is None
    assert "holds 59 finished functions" in judge([_ps_log(5, 8)[:59], falling])
    assert "one per scheduled step" in judge([_ps_log(5, 8), falling[:30]])
    assert "apply the gradients" in judge([_ps_log(5, 8), [1.0] * 60])
    assert "was not slow" in judge([_ps_log(20, 8), falling])
    assert "not the stalest" in judge([_ps_log(5, 0), falling])
    assert "strategy.trace.functions" in judge([[1, 2, 3], falling])


def test_the_placement_rule_is_what_a_real_cluster_does():
    """q6.1's round-robin rule matches where a real ParameterServerStrategy puts 5 variables."""
    from conftest import run_python

    result = run_python("""
        import json, warnings
        import mirrortutor as mt, tensorflow as tf
        mt.setup(2, quiet=True)
        warnings.simplefilter("ignore")
        with mt.LocalCluster(workers=1, ps=2, mode="in_process") as cluster:
            with cluster.strategy.scope():
                made = [tf.Variable(float(i)) for i in range(5)]
            print(json.dumps([int(v.device.split("task:")[1][0]) for v in made]))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == ch06.ps_placement(5, 2)


def test_the_scenario_verdict_quotes_the_cost_model():
    """q5.1's message uses estimate_step's speed-ups, and B really is the fastest option."""
    load_questions()
    speedups = {k: mt.costmodel.estimate_step(25.6e6, 0.1, o["num_replicas"], o["interconnect"],
                                              algorithm=o["algorithm"]).speedup
                for k, o in ch05.OPTIONS.items()}
    assert max(speedups, key=speedups.get) == "B"
    assert f"about {speedups['B']:.1f} times" in QUESTIONS["q5.1"].right
    assert math.isclose(speedups["A"], 16 * 0.1 / mt.costmodel.estimate_step(
        25.6e6, 0.1, 16, "eth-10g").step_s)


def test_the_partitioner_rule_is_tensorflows():
    """q6.2's num_shards_rule agrees with MinSizePartitioner on the public and the hidden cases."""
    cases = [*ch06.SHARDINGS, *release.hidden_inputs(key("06"))["q6.2"], (3, 1000, 100, 16)]
    for rows, cols, min_bytes, most in cases:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=min_bytes, max_shards=most)
        assert ch06.num_shards_rule(rows, cols, min_bytes, most) == \
            int(partitioner(tf.TensorShape([rows, cols]), tf.float32)[0]), (rows, cols, min_bytes, most)


@pytest.mark.parametrize("slip, words", [
    (lambda r, c, m, k: max(1, min(r, k, math.ceil(r * c * 4 / m))), None),
    (lambda r, c, m, k: max(1, min(k, math.ceil(r * c * 4 / m))), "rows make at most"),
    (lambda r, c, m, k: max(1, min(r, k, r * c * 4 // m)), "rounds UP"),
    (lambda r, c, m, k: max(1, min(r, k, math.ceil(r * c / m))), "MinSizePartitioner makes"),
])
def test_the_partitioner_judge_needs_the_row_cap(slip, words):
    """q6.2 on its public and hidden cases: TensorFlow's rule is right; the rule chapter 06 prints
    (no row cap) is wrong on a variable with fewer rows than its bytes ask for, and is told why."""
    from mirrortutor.grading.checks import verdict

    q = load_questions()["q6.2"]
    hidden = release.hidden_inputs(key("06"))["q6.2"]
    assert any(r < min(k, math.ceil(r * c * 4 / m)) for r, c, m, k in [*ch06.SHARDINGS, *hidden])
    right, said = verdict(q, json.loads(json.dumps(q.kind.export(slip, hidden))), hidden)
    assert right == (words is None), said
    assert words is None or words in said


def test_the_worker_shard_rule_is_tf_data_shard_then_batch():
    """q6.4's worker_batches_rule is what Dataset.range(n).shard(workers, worker).batch(b) reads,
    on the public and the hidden cases, the worker index given as the int64 tensor TF gives."""
    cases = [*ch06.WORKER_CASES, *release.hidden_inputs(key("06"))["q6.4"]]
    for worker, workers, examples, batch in cases:
        dataset = tf.data.Dataset.range(examples).shard(workers, tf.constant(worker, tf.int64))
        read = [b.tolist() for b in dataset.batch(batch).as_numpy_iterator()]
        assert ch06.worker_batches_rule(worker, workers, examples, batch) == read


def test_a_dataset_is_handed_in_as_its_elements():
    """A tf.data.Dataset answer becomes its elements; one that never ends is marked incomplete
    after MAX_ELEMENTS, so a judge can say so instead of waiting for ever."""
    from mirrortutor.grading.answers import MAX_ELEMENTS, to_data

    assert to_data(tf.data.Dataset.range(5).batch(2)) == {
        "type": "Dataset", "elements": [[0, 1], [2, 3], [4]], "complete": True}
    endless = to_data(tf.data.Dataset.range(3).repeat())
    assert endless["complete"] is False and len(endless["elements"]) == MAX_ELEMENTS


@pytest.mark.parametrize("slip, words", [
    (lambda i, n, e, b: tf.data.Dataset.range(e).shard(n, i).batch(b), None),
    (lambda i, n, e, b: tf.data.Dataset.range(e).batch(b).shard(n, i), "You cut batches first"),
    (lambda i, n, e, b: tf.data.Dataset.range(e).batch(b), "Every worker got all the examples"),
    (lambda i, n, e, b: tf.data.Dataset.range(e).shard(n, i).batch(b, drop_remainder=True),
     "The last, shorter batch is missing"),
    (lambda i, n, e, b: tf.data.Dataset.range(e).shard(n, i).batch(b).repeat(), "never ends"),
    (lambda i, n, e, b: list(range(int(i), e, n)), "return the tf.data.Dataset itself"),
])
def test_the_worker_dataset_judge_names_each_slip(slip, words):
    """q6.4 handed in as the grader gets it (exported in a kernel, a JSON round trip): the shard
    then batch is right, each realistic slip gets its own explanation."""
    from mirrortutor.grading.checks import verdict

    q = load_questions()["q6.4"]
    hidden = release.hidden_inputs(key("06"))["q6.4"]
    right, said = verdict(q, json.loads(json.dumps(q.kind.export(slip, hidden))), hidden)
    assert right == (words is None), said
    assert words is None or words in said


def test_the_batch_size_trade_off_has_one_right_answer():
    """q5.2: 32 scales below 90%, 64 above: the smallest batch that reaches 90% is 64."""
    efficiency = ch05.efficiencies()
    assert efficiency[32] < ch05.TARGET <= efficiency[64] < efficiency[128]


def test_the_schedule_recipes_warm_up_is_keras_own(devices):
    """q5.3's reference rate warms up as Keras's own warm-up does (CosineDecay with warmup_target,
    held flat by alpha=1, keras/src/optimizers/schedules/learning_rate_schedule.py), on the public
    and the hidden recipes, before any decay."""
    import keras

    for case in [*ch05.SCHEDULE_CASES, *release.hidden_inputs(key("05"))["q5.3"]]:
        base, k, spe, warm_epochs, decays = case
        if not warm_epochs:
            continue
        keras_warmup = keras.optimizers.schedules.CosineDecay(
            base, decay_steps=1, alpha=1.0, warmup_target=base * k, warmup_steps=warm_epochs * spe)
        for step in ch05.schedule_steps(*case):
            if step // spe < min(decays, default=step // spe + 1):
                assert math.isclose(ch05.recipe_rate(step, *case), float(keras_warmup(step)),
                                    rel_tol=1e-5), (case, step)


def _schedule(base_lr, num_replicas, steps_per_epoch, warmup_epochs, decay_epochs, *,
              scale=True, warm=True, decay=True):
    """The key's schedule, or one with a part of the recipe left out (a student's mistakes)."""
    import keras

    peak = base_lr * (num_replicas if scale else 1)
    warmup_steps = warmup_epochs * steps_per_epoch if warm else 0

    class Recipe(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            epoch = tf.floor(step / steps_per_epoch)
            decays = sum(tf.cast(epoch >= d, tf.float32) for d in decay_epochs if decay)
            after = peak * tf.pow(0.1, decays)
            if warmup_steps == 0:
                return after
            during = base_lr + (peak - base_lr) * step / warmup_steps
            return tf.where(step < warmup_steps, during, after)

    return Recipe()


@pytest.mark.parametrize("mistake, said", [
    (dict(), None),
    (dict(scale=False), "without the linear scaling rule"),
    (dict(warm=False), "It starts at the peak"),
    (dict(decay=False), "a tenth of what it was"),
])
def test_the_schedule_question_runs_the_schedule_in_keras(devices, mistake, said):
    """q5.3 judges what the schedule gives inside a Keras optimizer on every recipe, hidden ones
    too; each part of the recipe left out gets its own reason."""
    load_questions()
    q = QUESTIONS["q5.3"]
    hidden = release.hidden_inputs(key("05"))["q5.3"]

    def scaled_schedule(*case):
        return _schedule(*case, **mistake)

    data = answers.normalised(q.kind.export(scaled_schedule, hidden))
    assert [c["case"] for c in data["calls"]][-len(hidden):] == [list(c) for c in hidden]
    ok, line = verdict(q, data, hidden)
    assert ok is (said is None), line
    if said:
        assert said in line


def test_a_schedule_that_is_not_one_or_branches_in_python_gets_a_reason(devices):
    """A number is not a schedule; a Python `if` on the step tensor fails where fit traces it."""
    import keras

    load_questions()
    q = QUESTIONS["q5.3"]

    class PythonIf(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return 0.05 if step < 11 else 0.4

    for answer, said in ((lambda *case: 0.4, "not a keras.optimizers.schedules"),
                         (lambda *case: PythonIf(), "OperatorNotAllowedInGraphError")):
        ok, line = verdict(q, answers.normalised(q.kind.export(answer, [])), [])
        assert not ok and said in line, line


def test_the_sync_async_trade_off_prices_each_option():
    """q7.3: B is the fastest but over the staleness limit, so C (the fast three) is the answer."""
    rates = ch07.throughputs()
    assert rates["B"] > rates["C"] > rates["A"]
    assert len(ch07.WORKER_SECONDS) - 1 > ch07.STALENESS_LIMIT


def test_the_pipeline_and_straggler_rules_and_the_diagnosis_judge():
    """q9.1: reading overlaps with compute (the longer one sets the step); q9.2: 3 of 4 replicas
    wait the 50 ms; q9.3 accepts a stragglers diagnosis of about that waiting from steps run in
    tf.function, and nothing else."""
    from mirrortutor.grading.checks import verdict

    assert ch09.pipeline_step_seconds(0.1, 0.02, 1, False) == 0.1
    assert ch09.pipeline_step_seconds(0.1, 0.02, 4, False) == 0.025
    assert ch09.pipeline_step_seconds(0.1, 0.02, 1, True) == 0.02
    assert ch09.mean_wait_ms() == 37.5
    load_questions()
    q = QUESTIONS["q9.3"]
    measured = {"type": "Diagnosis", "replicas": 4, "cause": "stragglers", "waiting_s": 0.043,
                "eager": False}
    assert verdict(q, measured, [])[0]
    for wrong in ({**measured, "cause": "input"}, {**measured, "waiting_s": 0.002},
                  {**measured, "replicas": 2}, {**measured, "eager": True},
                  {"cause": "stragglers"}, "stragglers"):
        right, said = verdict(q, wrong, [])
        assert not right and "not yet" in said, said


def multi_worker_step_0(global_batch, workers, policy):
    """Each worker's example numbers at step 0 of the worker program's pipeline, built the way
    MultiWorkerMirroredStrategy's experimental_distribute_dataset builds it for one replica per
    worker (DistributedDataset._create_cloned_datasets_from_dataset with an input context,
    tensorflow/python/distribute/input_lib.py): rebatch by batch_sizes_for_worker, then
    input_ops.auto_shard_dataset with the policy the dataset's options carry."""
    from tensorflow.python.data.experimental.ops import distribute
    from tensorflow.python.distribute import input_ops

    shards = []
    for w in range(workers):
        dataset = tf.data.Dataset.range(3 * global_batch).batch(global_batch, drop_remainder=True)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy[policy]
        dataset = dataset.with_options(options).rebatch(
            distribute.batch_sizes_for_worker(global_batch, workers, 1, w))
        dataset = input_ops.auto_shard_dataset(dataset, workers, w, workers)
        shards.append(next(iter(dataset)).numpy().tolist())
    return shards


@pytest.mark.parametrize("global_batch, workers", [(40, 3), (31, 3), (64, 2), (33, 2), (30, 4)])
def test_the_shard_rules_are_what_tf_distribute_makes(global_batch, workers):
    """q8.1–q8.3: ch08.data_shards (DATA: ceil(B / n) each, the rest last) and ch08.off_sizes
    (OFF: every worker from example 0, batch_sizes_for_worker's sizes) are what TensorFlow's
    multi-worker input pipeline gives each worker at step 0, on the exercise's job (40 over 3)
    and on others, uneven ones included. The exercise's own run on 3 worker processes shows the
    same (its stored outputs, checked by nbval)."""
    data = multi_worker_step_0(global_batch, workers, "DATA")
    assert [[s[0], s[-1]] if s else [] for s in data] == ch08.data_shards(workers, global_batch)
    assert all(s == list(range(s[0], s[-1] + 1)) for s in data if s)  # consecutive examples
    off = multi_worker_step_0(global_batch, workers, "OFF")
    assert off == [list(range(n)) for n in ch08.off_sizes(workers, global_batch)]
    assert len({i for s in off for i in s}) == ch08.off_distinct(workers, global_batch)


def test_the_shard_map_questions_name_each_tempting_mistake():
    """q8.1–q8.3 accept the key's answers and say what each likely mistake comes from: an even
    split, floor-then-remainder, two replicas per CPU worker, a wrong rule, the global batch
    counted with repeats."""
    load_questions()
    right_map = [[0, 13], [14, 27], [28, 39]]
    cases = {
        "q8.1": [(right_map, True, "ceil(40 / 3) = 14"),
                 ([[0, 13], [14, 26], [27, 39]], False, "as evenly as possible"),
                 ([[0, 12], [13, 25], [26, 39]], False, "rounds UP"),
                 ([[0, 6]] * 6, False, "ONE replica")],
        "q8.2": [((right_map, "a"), True, "rule A"),
                 ((right_map, "B"), False, "would not give"),
                 (([[0, 13], [14, 26], [27, 39]], "A"), False, "traces show"),
                 ((right_map, "D"), False, "one of the letters")],
        "q8.3": [(14, True, "14 distinct"), (40, False, "DISTINCT"), (13, False, "worker 0")],
    }
    for qid, answers in cases.items():
        for answer, ok, words in answers:
            got, said = verdict(QUESTIONS[qid], json.loads(json.dumps(answer)), [])
            assert got is ok and words in said, (qid, answer, said)


def _train_on(devices, replicas, global_batch, rate, divisor=None):
    """q10.5's loop under TensorFlow's own MirroredStrategy; ``divisor``: each replica divides its
    loss by this many examples instead of the global batch (the mistake the judge names)."""
    import keras
    from mirrortutor.grading.questions import ch10

    x, y = ch10.linear_data()
    strategy = tf.distribute.MirroredStrategy(devices[:replicas],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(
            1, use_bias=False, kernel_initializer="zeros")])
        optimizer = keras.optimizers.SGD(learning_rate=rate)

    def replica_step(batch):
        xb, yb = batch
        with tf.GradientTape() as tape:
            per_example = tf.square(yb - model(xb, training=True))[:, 0]
            loss = tf.reduce_sum(per_example) / (divisor or global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def step(batch):
        strategy.run(replica_step, args=(batch,))

    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)
    for batch in strategy.experimental_distribute_dataset(data):
        step(batch)
    return model.get_weights()


def test_q10_5_reference_is_tensorflows_update_and_the_per_replica_mean_is_named(devices):
    """q10.5's numpy SGD is what MirroredStrategy computes on every public and hidden case; a loop
    that divides each replica's loss by its own batch is told so."""
    from mirrortutor.grading.answers import Calls
    from mirrortutor.grading.questions import ch10

    load_questions()
    cases = [*ch10.STEP_CASES, *[tuple(c) for c in release.hidden_inputs(key("10"))["q10.5"]]]
    results = [_train_on(devices, *case) for case in cases]
    for case, weights in zip(cases, results):
        assert np.allclose(weights[0][:, 0], ch10.sgd_weights(case[1], case[2]), rtol=1e-4, atol=1e-5)

    def verdict_of(results):
        data = {"callable": True, "source": "def train_on(...)", "calls": [
            {"case": list(c), "result": [w.tolist() for w in r]} for c, r in zip(cases, results)]}
        return QUESTIONS["q10.5"].judge(Calls("train_on", data, [list(c) for c in cases]))

    assert verdict_of(results) is None
    wrong = [_train_on(devices, r, b, lr, divisor=b // r) for r, b, lr in cases]
    assert "global batch" in verdict_of(wrong) and "each replica divided" in verdict_of(wrong)


def test_the_input_pipeline_rule_is_what_tf_data_makes():
    """q8.4: ch08.pipeline is what tf.data makes of the worker program's input pipeline (full
    batches, the option set), read back by describe_dataset; an unset option, a short last batch
    and a non-dataset are each named, and the rule is checked on the key's hidden cases too."""
    from mirrortutor.grading.checks import verdict

    def right(n, g, policy):
        dataset = tf.data.Dataset.range(n).batch(g, drop_remainder=True)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy[policy]
        return dataset.with_options(options)

    hidden = [[7, 8, "DATA"], [33, 11, "OFF"], [100, 25, "FILE"], [12, 5, "AUTO"]]
    for case in [*ch08.PIPELINE_CASES, *hidden]:
        assert ch08.describe_dataset(right(*case)) == ch08.pipeline(*case), case
    load_questions()
    q = QUESTIONS["q8.4"]
    assert verdict(q, q.kind.export(right, hidden), hidden)[0]
    unset = lambda n, g, p: tf.data.Dataset.range(n).batch(g, drop_remainder=True)  # noqa: E731
    short = lambda n, g, p: right(n, g, p).unbatch().batch(g)  # noqa: E731
    for wrong, words in ((unset, "never set"), (short, "drop_remainder"),
                         (lambda n, g, p: list(range(n)), "tf.data.Dataset itself")):
        ok, said = verdict(q, q.kind.export(wrong, hidden), hidden)
        assert not ok and words in said, said
