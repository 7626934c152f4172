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
    """q2.2's fit_trains matches Keras 3.15 fit on 249 examples over 3 replicas: a batch of 60
    (first batch cut 20/20/20) trains; 64 (22/22/20) fails in the first-batch build; 256 (one
    batch of all 249, cut 83/83/83) trains, though 256 is no multiple of 3."""
    import keras

    data = mt.data.load("digits").take(ch02.FIT_EXAMPLES)
    for global_batch in (60, 64, 256):
        mt.new_collective_keys()  # a fit's all-reduce may have run in this process before
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
    assert [b for b in ch02.FIT_CHOICES if ch02.fit_trains(b)] == [60, 66, 256]


def test_the_ring_bytes_rule_is_the_simulators():
    """q4.3's reference: 2·S minus chunks (r + 1) and (r + 2) mod n, the simulator's count, on the
    public and the hidden cases."""
    import numpy as np

    from mirrortutor.grading.questions import ch04

    for n, count in [*ch04.BYTE_CASES, *release.hidden_inputs(key("04"))["q4.3"]]:
        sizes = [4 * len(c) for c in np.array_split(np.zeros(count), n)]
        rule = [2 * sum(sizes) - sizes[(r + 1) % n] - sizes[(r + 2) % n] for r in range(n)]
        assert ch04.ring_sent(n, count) == rule, (n, count)


@pytest.mark.parametrize("answer, right, words", [
    (5.0, True, None),
    ([5.0] * 8, True, None),
    ([5.0] + [4.0] * 7, False, "adds it to every copy"),        # "only copy 0 is written"
    ([5.0] * 7 + [4.0], False, "for copy 7"),                     # the wrong copy is named
    ([4.0 + i for i in range(1, 9)], False, "aggregation=NONE"),
    (40.0, False, "that is SUM"),
])
def test_the_only_first_replica_judge_names_the_copy_it_rejects(answer, right, words):
    """q1.1 takes one number or the 8 copies; a list is judged copy by copy, so a right copy 0 is
    never called wrong, and the slip 'only replica 0's copy changes' is told about the broadcast."""
    load_questions()
    ok, said = verdict(QUESTIONS["q1.1"], answer, [])
    assert ok == right, said
    assert words is None or words in said, said
    assert "you predicted 5 " not in said and "you predicted 5," not in said


def test_the_staleness_rule_is_version_applied_minus_version_read():
    """q7.1's reference counts staleness as chapter 07 does: updates applied in between, an
    apply at the moment of a read counted before it (the read sees it), on every case."""
    for reads, applies in [*ch07.TIMELINES, *release.hidden_inputs(key("07"))["q7.1"]]:
        read_version = [sum(1 for t in applies if t <= r) for r in reads]  # updates the read saw
        applied_version = list(range(len(applies)))  # updates are logged in the order applied
        assert ch07.staleness_of(reads, applies) == [
            a - r for a, r in zip(applied_version, read_version)]


@pytest.mark.parametrize("slip, words", [
    (ch07.staleness_of, None),
    (ch07._counting_ties, "strictly after the read"),
    (lambda reads, applies: [w + 1 for w in ch07.staleness_of(reads, applies)],
     "count only the others"),
])
def test_the_staleness_judge_states_the_tie_rule(slip, words):
    """q7.1's public cases hold reads at the moment of another update's apply (the apply lands
    first), so counting that apply is wrong on a case the student sees, and is told why."""
    load_questions()
    q = QUESTIONS["q7.1"]
    reads, applies = ch07.TIMELINES[1]
    assert any(r in applies for r in reads)  # a tie in a public case
    hidden = release.hidden_inputs(key("07"))["q7.1"]
    right, said = verdict(q, json.loads(json.dumps(q.kind.export(slip, hidden))), hidden)
    assert right == (words is None), said
    assert words is None or words in said


def _ps_log(stale: list[int], slow_seconds: float = 0.15, at_once: int = 2) -> list[dict]:
    """40 functions as strategy.trace.functions hands them in: workers 0, 1, 2 in turn, each
    ``stale[i % len(stale)]`` stale; worker 1's take ``slow_seconds``, the others' 0.01 s; they
    start ``at_once`` at a time, a second apart (1: each ends before the next starts)."""
    rows, version = [], 0
    for i in range(40):
        worker = i % 3
        version += 1
        seconds = slow_seconds if worker == 1 else 0.01
        started = float(i // at_once)
        rows.append({"type": "ScheduledRecord", "schedule": i, "function": "step_fn",
                     "worker": worker, "started": started, "ended": started + seconds,
                     "version_read": version - 1 - stale[i % len(stale)],
                     "version_written": version})
    return rows


def test_the_bounded_staleness_judge_reads_the_log_and_the_losses():
    """q7.4: right for a log of 40 steps, none more than 1 stale, worker 1 slow, some running
    at the same time, and falling losses; each slip (steps missing, a loss per step missing,
    losses not falling, no straggler, an update 2 stale, one step at a time) gets its own
    reason."""
    load_questions()

    def judge(answer):
        right, line = verdict(QUESTIONS["q7.4"], answer, [])
        return None if right else line

    falling = [2.0 - i / 40 for i in range(40)]
    assert judge([_ps_log([0, 1]), falling]) is None
    assert judge([_ps_log([0]), falling]) is None  # two at once, both 0 stale: within the limit
    said = judge([_ps_log([0], at_once=1), falling])  # one at a time: 0 stale, two workers idle
    assert "no two of your steps ran at the same time" in said
    assert ch07._overlapping(_ps_log([0], at_once=1)) == 0
    assert ch07._overlapping(_ps_log([0, 1])) == 40
    assert "holds 39 finished functions" in judge([_ps_log([0, 1])[:39], falling])
    assert "one per scheduled step" in judge([_ps_log([0, 1]), falling[:30]])
    assert "not below" in judge([_ps_log([0, 1]), [1.0] * 40])
    assert "straggler was not there" in judge([_ps_log([0, 1], slow_seconds=0.01), falling])
    said = judge([_ps_log([0, 1, 2]), falling])
    assert "2 other updates landed while it ran" in said and "Start no new step" in said
    assert "strategy.trace.functions" in judge([[1, 2, 3], falling])


def test_the_bounded_staleness_loop_on_a_real_cluster():
    """q7.4's rule on TensorFlow's coordinator (3 workers, 1 ps, in process, worker 1 waiting
    0.1 s as in the exercise): steps started two at a time, the next two only once both have
    ended, leave no logged function more than 1 stale, some of them running at the same time,
    and the judge says right; chapter 07's loop, every step scheduled at once, leaves the
    straggler's updates staler, and the judge says which one; one step at a time leaves every
    update 0 stale but no two functions meet, and the judge says so."""
    from conftest import run_python

    result = run_python("""
        import json, os, warnings
        import keras, mirrortutor as mt, tensorflow as tf
        from mirrortutor.grading.answers import normalised, to_data
        mt.setup(2, quiet=True)
        warnings.simplefilter("ignore")
        cluster = mt.LocalCluster(workers=3, ps=1, mode="in_process").start()
        os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster.info.spec,
                                              "task": {"type": "chief", "index": 0}})
        strategy = mt.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver())
        coordinator = mt.ClusterCoordinator(strategy)
        digits = mt.data.load("digits")
        with strategy.scope():
            keras.utils.set_random_seed(1)
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
            optimizer = keras.optimizers.SGD(0.1)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        iterator = iter(coordinator.create_per_worker_dataset(lambda: tf.data.Dataset
            .from_tensor_slices((digits.x, digits.y)).shuffle(1000).repeat().batch(32)))

        @tf.function
        def step_fn(iterator):
            def replica_fn(batch):
                x, y = batch
                with tf.GradientTape() as tape:
                    logits = mt.straggle(model(x, training=True), 0.1, worker=1)
                    loss = tf.nn.compute_average_loss(loss_fn(y, logits))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            return strategy.reduce("SUM", strategy.run(replica_fn, args=(next(iterator),)),
                                   axis=None)

        start = model.get_weights()

        def run(loop):
            model.set_weights(start)
            first = strategy.trace.scheduled
            losses = loop()
            log = [f for f in strategy.trace.functions if f.schedule >= first]
            return normalised(to_data([log, losses]))

        def two_at_a_time():
            losses = []
            for _ in range(20):
                running = [coordinator.schedule(step_fn, args=(iterator,)) for _ in range(2)]
                losses += [float(r.fetch()) for r in running]
            return losses

        def all_at_once():
            results = [coordinator.schedule(step_fn, args=(iterator,)) for _ in range(40)]
            coordinator.join()
            return [float(r.fetch()) for r in results]

        def one_at_a_time():
            return [float(coordinator.schedule(step_fn, args=(iterator,)).fetch())
                    for _ in range(40)]

        print(json.dumps({"two": run(two_at_a_time), "all": run(all_at_once),
                          "one": run(one_at_a_time)}))
        cluster.stop()
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    load_questions()
    for name, data in runs.items():
        log = data[0]
        # schedule numbers of the later runs start at 40 and 80: the judge reads them as they come
        worst = max(f["version_written"] - 1 - f["version_read"] for f in log)
        assert (worst <= 1) == (name != "all"), (name, worst)
        assert (ch07._overlapping(log) == 0) == (name == "one"), (name, ch07._overlapping(log))
        right, said = verdict(QUESTIONS["q7.4"], data, [])
        assert right == (name == "two"), said
        assert right or {"all": "other updates landed while it ran",
                         "one": "no two of your steps ran at the same time"}[name] in said


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
    """q5.1's message uses estimate_step's speed-ups at 120 ms of compute (chapter 04's table
    prices 100 ms), and B really is the fastest option."""
    load_questions()
    assert ch05.SCENARIO == dict(num_parameters=25.6e6, compute_s=0.12)
    speedups = {k: mt.costmodel.estimate_step(25.6e6, 0.12, o["num_replicas"], o["interconnect"],
                                              algorithm=o["algorithm"]).speedup
                for k, o in ch05.OPTIONS.items()}
    assert max(speedups, key=speedups.get) == "B"
    assert f"about {speedups['B']:.1f} times" in QUESTIONS["q5.1"].right
    assert math.isclose(speedups["A"], 16 * 0.12 / mt.costmodel.estimate_step(
        25.6e6, 0.12, 16, "eth-10g").step_s)


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
    (lambda i, n, e, b: tf.range(i, e, n), "return the tf.data.Dataset itself"),
    (lambda i, n, e, b: tf.data.Dataset.range(int(i), e, n).batch(b), "worker_index is a symbolic"),
    (lambda i, n, e, b: tf.data.Dataset.range(i.numpy(), e, n).batch(b), "no attribute 'numpy'"),
])
def test_the_worker_dataset_judge_names_each_slip(slip, words):
    """q6.4 handed in as the grader gets it (exported in a kernel, a JSON round trip): the shard
    then batch is right, each realistic slip gets its own explanation. The function is called as
    a dataset_fn calls it, in a tf.function with the worker index symbolic, so code that reads
    the index as a Python number (right when called eagerly) is wrong, as on a cluster."""
    from mirrortutor.grading.checks import verdict

    q = load_questions()["q6.4"]
    hidden = release.hidden_inputs(key("06"))["q6.4"]
    right, said = verdict(q, json.loads(json.dumps(q.kind.export(slip, hidden))), hidden)
    assert right == (words is None), said
    assert words is None or words in said


def test_the_worker_dataset_check_calls_it_as_a_cluster_does():
    """q6.4 traces the function as create_per_worker_dataset traces a dataset_fn: under
    ParameterServerStrategy the index from experimental_get_current_worker_index() is a symbolic
    int64 scalar in a tf.function (coordinator_context.py), so int() on it fails on a real
    cluster as in the check (TypeError, or ValueError once autograph turns int() into a cast),
    and Dataset.shard works in both (one worker, one ps, in process)."""
    from conftest import run_python

    result = run_python("""
        import json, warnings
        import mirrortutor as mt, tensorflow as tf
        mt.setup(2, quiet=True)
        warnings.simplefilter("ignore")
        def shard(w, n, e, b): return tf.data.Dataset.range(e).shard(n, w).batch(b)
        def python_int(w, n, e, b): return tf.data.Dataset.range(int(w), e, n).batch(b)
        said = {}
        with mt.LocalCluster(workers=1, ps=1, mode="in_process") as cluster:
            for fn in (shard, python_int):
                def dataset_fn():
                    worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                    return fn(worker, 1, 5, 2)
                try:
                    per_worker = cluster.coordinator.create_per_worker_dataset(dataset_fn)
                    said[fn.__name__] = "ok"
                except Exception as exc:
                    said[fn.__name__] = type(exc).__name__
        print(json.dumps(said))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    cluster = json.loads(result.stdout.strip().splitlines()[-1])
    assert cluster["shard"] == "ok" and cluster["python_int"] in ("TypeError", "ValueError"), cluster
    q = load_questions()["q6.4"]
    for fn, right in ((lambda w, n, e, b: tf.data.Dataset.range(e).shard(n, w).batch(b), True),
                      (lambda w, n, e, b: tf.data.Dataset.range(int(w), e, n).batch(b), False)):
        assert verdict(q, json.loads(json.dumps(q.kind.export(fn, []))), [])[0] is right


def test_the_batch_size_trade_off_has_one_right_answer():
    """q5.2: 32 scales below 90%, 64 above: the smallest batch that reaches 90% is 64."""
    efficiency = ch05.efficiencies()
    assert efficiency[32] < ch05.TARGET <= efficiency[64] < efficiency[128]


@pytest.mark.parametrize("priced, said", [
    (dict(), None),
    (dict(algorithm="reduce_to_one"), "this machine runs the ring"),
    (dict(overlap=True), "overlap=True"),
])
def test_the_batch_size_judge_reads_how_the_estimates_were_priced(priced, said):
    """q5.2 judges the choice against estimates priced as asked (ring, no overlap): estimates
    priced with reduce_to_one (no batch reaches 90%) or with overlap (every batch does) are
    wrong for that reason, not for a choice their own numbers would back."""
    load_questions()
    estimates = {b: mt.costmodel.estimate_step(25.6e6, 0.003 * b, 8, "pcie3-x16", **priced)
                 for b in ch05.BATCHES}
    reached = [b for b, e in estimates.items() if e.scaling_efficiency >= ch05.TARGET]
    choice = min(reached) if reached else max(ch05.BATCHES)
    right, line = verdict(QUESTIONS["q5.2"], answers.normalised(answers.to_data(
        (choice, estimates))), [])
    assert right is (said is None), line
    assert said is None or said in line


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


def test_the_pipeline_and_straggler_rules_and_the_waiting_judges():
    """q9.1: reading overlaps with compute (the longer one sets the step); q9.2: in the stated
    model replicas 0 and 2 wait replica 1's 50 ms, replica 3 the 30 ms left after its own 20 ms
    hold, replica 1 nobody, and each likely slip is named; q9.3 accepts that pattern of waiting,
    diagnosed as stragglers from steps run in tf.function, and nothing else."""
    from mirrortutor.grading.checks import verdict

    assert ch09.pipeline_step_seconds(0.1, 0.02, 1, False) == 0.1
    assert ch09.pipeline_step_seconds(0.1, 0.02, 4, False) == 0.025
    assert ch09.pipeline_step_seconds(0.1, 0.02, 1, True) == 0.02
    assert ch09.model_waits_ms() == [50.0, 0.0, 50.0, 30.0]
    load_questions()
    q2 = QUESTIONS["q9.2"]
    assert verdict(q2, [50, 0, 50, 30], [])[0]
    for wrong, words in (([50, 0, 50, 50], "remaining 50 − 20"),
                         ([50, 0, 50, 0], "not the slowest"),
                         ([50, 0, 50, 20], "not its waiting"),
                         ([0, 50, 0, 20], "Those are the holds"),
                         ([70, 0, 70, 50], "not 50 + 20"),
                         ([37.5] * 4, "replica 1 waits for nobody"),
                         (32.5, "one number per replica")):
        right, said = verdict(q2, wrong, [])
        assert not right and words in said, (wrong, said)
    q3 = QUESTIONS["q9.3"]
    measured = {"type": "StragglerRun", "steps": [2, 3, 4, 5, 6, 7], "replicas": 4,
                "eager": False, "cause": "stragglers", "waiting_ms": [65.0, 1.5, 64.0, 28.0]}
    assert verdict(q3, measured, [])[0]
    for wrong, words in (({**measured, "waiting_ms": [61.0, 0.3, 60.0, 61.0]}, "did not happen"),
                         ({**measured, "waiting_ms": [62.0, 1.0, 63.0, 2.3]}, "hardly at all"),
                         ({**measured, "waiting_ms": [5.0, 0.5, 6.0, 4.0]}, "about 50 ms"),
                         ({**measured, "waiting_ms": [65.0, 30.0, 64.0, 28.0]}, "wait for nobody"),
                         ({**measured, "cause": "input"}, "'input'"),
                         ({**measured, "eager": True}, "tf.function"),
                         ({**measured, "steps": [0, 1, 2, 3, 4, 5]}, "8 steps"),
                         ({**measured, "replicas": 2}, "devices[:4]"),
                         ({"type": "Diagnosis", "cause": "stragglers"}, "the strategy"),
                         ({"type": "StragglerRun", "error": "NotRecordedError"}, "could not read")):
        right, said = verdict(q3, wrong, [])
        assert not right and words in said, (wrong, said)


def _straggler_run(devices, holds):
    """q9.3's key loop (8 steps on 4 replicas) with ``holds`` {replica: seconds} as mt.straggle
    lines, under the recording MirroredStrategy; returns what the check hands in of it."""
    import keras

    mt.new_collective_keys()
    strategy = mt.MirroredStrategy(devices[:4], recording=mt.Recording.timing())
    global_batch = 16 * strategy.num_replicas_in_sync
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        for replica, seconds in holds.items():
            grads = mt.straggle(grads, seconds, replica=replica)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    train = mt.data.digits().take(512).to_tf(with_index=False)
    batches = iter(strategy.experimental_distribute_dataset(
        train.repeat().batch(global_batch, drop_remainder=True)))
    for _ in range(8):
        float(train_step(next(batches)))
    return answers.normalised(QUESTIONS["q9.3"].kind.export(strategy, []))


def test_the_straggler_judge_on_real_runs(devices):
    """q9.3's margins hold on real TensorFlow runs on this machine: the key's two holds are
    accepted, a run without replica 3's hold and one with both holds at 50 ms are refused."""
    load_questions()
    q = QUESTIONS["q9.3"]
    key_run = _straggler_run(devices, {1: 0.05, 3: 0.02})
    assert verdict(q, key_run, [])[0], key_run
    for holds, words in (({1: 0.05}, "did not happen"), ({1: 0.05, 3: 0.05}, "hardly at all")):
        run = _straggler_run(devices, holds)
        right, said = verdict(q, run, [])
        assert not right and words in said, (holds, run, said)


def multi_worker_steps(global_batch, workers, policy, num_examples, steps):
    """Each worker's example numbers at steps 0, 1, … of the worker program's pipeline (80
    examples in repeated global batches, one replica per worker), built the way
    MultiWorkerMirroredStrategy's experimental_distribute_dataset builds it
    (DistributedDataset._create_cloned_datasets_from_dataset with an input context,
    tensorflow/python/distribute/input_lib.py): rebatch by batch_sizes_for_worker, then
    input_ops.auto_shard_dataset with the policy the dataset's options carry; one sub-batch a
    step."""
    from tensorflow.python.data.experimental.ops import distribute
    from tensorflow.python.distribute import input_ops

    out = []
    for w in range(workers):
        dataset = tf.data.Dataset.range(num_examples).batch(global_batch, drop_remainder=True)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy[policy]
        dataset = dataset.repeat().with_options(options).rebatch(
            distribute.batch_sizes_for_worker(global_batch, workers, 1, w))
        dataset = input_ops.auto_shard_dataset(dataset, workers, w, workers)
        out.append([sub.numpy().tolist() for sub in dataset.take(steps)])
    return out


@pytest.mark.parametrize("global_batch, workers, num_examples",
                         [(40, 3, 80), (31, 3, 62), (64, 2, 128), (33, 2, 99), (30, 4, 60)])
def test_the_shard_rules_are_what_tf_distribute_makes(global_batch, workers, num_examples):
    """q8.1–q8.3: ch08.step_examples (OFF: every worker from example 0, its own rotated
    batch_sizes_for_worker cut, one sub-batch a step; DATA: ceil(B / n) each, the rest last) is
    what TensorFlow's multi-worker input pipeline gives each worker at every step, on the
    exercise's job (40 over 3, 80 examples) and on others, uneven ones included, and
    ch08.steps_for_all counts the steps until every example was trained on. The exercise's own
    run on 3 worker processes shows the same (its stored outputs, checked by nbval)."""
    steps = 2 * workers * num_examples // global_batch
    for policy in ("OFF", "DATA"):
        made = multi_worker_steps(global_batch, workers, policy, num_examples, steps)
        rule = ch08.step_examples(policy, workers, global_batch, num_examples, steps)
        assert made == rule, policy
        seen, need = set(), None
        for step in range(steps):
            seen |= {i for worker in made for i in worker[step]}
            if need is None and len(seen) == num_examples // global_batch * global_batch:
                need = step + 1
        assert need == ch08.steps_for_all(policy, workers, global_batch, num_examples), policy


def test_the_shard_map_questions_name_each_tempting_mistake():
    """q8.1–q8.3 accept the key's answers and say what each likely mistake comes from: DATA's cut,
    a new global batch every step, the sizes rotated the wrong way or not at all, a wrong
    explanation, DATA's step count or the last step's number."""
    load_questions()
    right = [[[0, 13], [14, 26]], [[0, 12], [13, 25]], [[0, 12], [13, 26]]]
    cases = {
        "q8.1": [(right, True, "takes one per step"),
                 ([[[0, 13], [40, 53]], [[14, 27], [54, 67]], [[28, 39], [68, 79]]], False,
                  "DATA's cut"),
                 ([[[0, 13], [40, 53]], [[0, 12], [40, 52]], [[0, 12], [40, 52]]], False,
                  "ONE per step"),
                 ([[[0, 13], [14, 26]], [[0, 12], [13, 26]], [[0, 12], [13, 25]]], False,
                  "rotated the wrong way"),
                 ([[[0, 13], [14, 26]]] * 3, False, "worker 0's sizes"),
                 ([[0, 13], [14, 27], [28, 39]], False, "[first, last] at step 0"),
                 ([[[0, 13], [14, 26]]] * 6, False, "ONE replica")],
        "q8.2": [((right, "a"), True, "one global batch lasts 3 steps"),
                 ((right, "B"), False, "would not give"),
                 ((right[:2] + [[[0, 12], [13, 25]]], "A"), False, "traces show"),
                 ((right, "D"), False, "one of the letters")],
        "q8.3": [(6, True, "6 steps, where DATA takes 2"), (2, False, "DATA's count"),
                 (5, False, "counted from 0"), (3, False, "ONE global batch")],
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


def _worker_input(context, num_examples, global_batch):
    """q8.4's key: this worker's examples, in full per-replica batches."""
    per_replica = context.get_per_replica_batch_size(global_batch)
    return (tf.data.Dataset.range(num_examples)
            .shard(context.num_input_pipelines, context.input_pipeline_id)
            .batch(per_replica, drop_remainder=True))


def test_the_worker_input_rule_is_what_tf_distribute_reads(devices):
    """q8.4: ch08.worker_batches is what tf.data makes of the key's dataset_fn for the context of
    every public and hidden case, read back by describe_dataset; under TensorFlow's own
    MirroredStrategy (one worker, 2 and 4 replicas) distribute_datasets_from_function hands those
    batches to the replicas in turn, one each per step, as the question says."""
    hidden = [tuple(c) for c in release.hidden_inputs(key("08"))["q8.4"]]
    for case in [*ch08.WORKER_CASES, *hidden]:
        got = ch08.describe_dataset(_worker_input(*ch08.input_context(*case)))
        assert got == ch08.worker_batches(*case), case
    for replicas, n, g in ((2, 16, 8), (4, 40, 16)):
        strategy = tf.distribute.MirroredStrategy(devices[:replicas])
        dist = strategy.distribute_datasets_from_function(lambda c: _worker_input(c, n, g))
        steps = [[t.numpy().tolist() for t in strategy.experimental_local_results(b)] for b in dist]
        batches = ch08.worker_batches(1, 0, replicas, n, g)["batches"]
        assert steps == [batches[s * replicas:(s + 1) * replicas]
                         for s in range(len(batches) // replicas)], (replicas, steps)


def test_the_worker_input_judge_names_each_likely_mistake():
    """q8.4 accepts the key and names each slip: batches of the global batch, of the global batch
    over the workers (R > 1), no shard, a shard by replicas, a short last batch, a non-dataset."""
    from mirrortutor.grading.checks import verdict

    load_questions()
    q = QUESTIONS["q8.4"]
    hidden = release.hidden_inputs(key("08"))["q8.4"]
    assert verdict(q, q.kind.export(_worker_input, hidden), hidden)[0]

    def shard(c, n):
        return tf.data.Dataset.range(n).shard(c.num_input_pipelines, c.input_pipeline_id)

    slips = {
        "the global batch": lambda c, n, g: shard(c, n).batch(g, drop_remainder=True),
        "divided by the workers": lambda c, n, g: shard(c, n).batch(
            g // c.num_input_pipelines, drop_remainder=True),
        "read the same examples": lambda c, n, g: tf.data.Dataset.range(n).batch(
            c.get_per_replica_batch_size(g), drop_remainder=True),
        "sharded by num_replicas_in_sync": lambda c, n, g: tf.data.Dataset.range(n).shard(
            c.num_replicas_in_sync, c.input_pipeline_id).batch(
            c.get_per_replica_batch_size(g), drop_remainder=True),
        "drop_remainder": lambda c, n, g: shard(c, n).batch(c.get_per_replica_batch_size(g)),
        "tf.data.Dataset itself": lambda c, n, g: list(range(n)),
    }
    for words, wrong in slips.items():
        ok, said = verdict(q, q.kind.export(wrong, hidden), hidden)
        assert not ok and words in said, (words, said)


def test_the_dtensor_split_rule_is_tensorflows_and_its_judge_names_each_slip(devices):
    """q10.4: ch10.PART is what DTensor puts on each device of the 2 × 2 mesh; the judge accepts
    it and names the slips: the columns cut once per device, the rows split too, the rows split
    instead of the columns, and an observation that is not what ran. (Last in this module: the
    DTensor mesh is made in the process the other tests share.)"""
    from tensorflow.experimental import dtensor
    from mirrortutor.grading.questions import ch10

    load_questions()
    mesh = dtensor.create_mesh(list(ch10.MESH.items()), devices=devices[:ch10.DEVICES])
    layout = dtensor.Layout([dtensor.UNSHARDED, "model"], mesh)
    kernel = dtensor.call_with_layout(tf.zeros, layout, shape=ch10.KERNEL)
    observed = [list(part.shape) for part in dtensor.unpack(kernel)]
    assert observed == [ch10.PART] * ch10.DEVICES == [[128, 32]] * 4
    cases = [(([[128, 32]] * 4, observed), True, "each half is repeated"),
             (([[128, 16]] * 4, observed), False, "along 'model' only"),
             (([[64, 32]] * 4, observed), False, "also splits the rows"),
             (([[32, 64]] * 4, observed), False, "that splits the rows"),
             (([[128, 32]] * 2, observed), False, "one shape per device"),
             ((observed, [[128, 16]] * 4), False, "observed: (128, 16)")]
    for answer, ok, words in cases:
        got, said = verdict(QUESTIONS["q10.4"], json.loads(json.dumps(answer)), [])
        assert got is ok and words in said, (answer, said)
