"""Recording(timeline=True): timestamps taken where each replica works, a consistent timeline,
numbers unchanged, and nothing added when it is off."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

import mirrortutor as mt
from helpers import digits, mlp_step, plain_mirrored, same_bits, train_custom, train_fit
from mirrortutor.record.tf_internals.graph import independent
from mirrortutor.record.timeline import KINDS
from mirrortutor.training.stragglers import sleep

GLOBAL = 64


def timed_steps(strategy, steps: int = 8, delay_replica: int | None = None, delay: float = 0.0):
    """A compiled custom step (iterator inside the function, Keras optimizer, the loss reduced
    after run), run ``steps`` times; one replica can sleep ``delay`` seconds after its gradients.
    Returns the host's wall times."""
    def hold_back(grads):  # (independent: the replicas traced after it must not wait)
        me = tf.distribute.get_replica_context().replica_id_in_sync_group
        with independent():
            slow = tf.cond(tf.equal(me, delay_replica), lambda: sleep(delay),
                           lambda: tf.constant(0, tf.int64))
        with tf.control_dependencies([slow]):
            return [tf.identity(g) for g in grads]

    step = mlp_step(strategy, 64, GLOBAL, digits(512).to_tf(GLOBAL, drop_remainder=True),
                    layers=1, lr=0.05, reduce=True,
                    after_grads=hold_back if delay_replica is not None else None)
    walls = []
    for _ in range(steps):
        start = time.perf_counter()
        step().numpy()
        walls.append(time.perf_counter() - start)
    return walls


def stamps_in_order(rec) -> list[np.ndarray]:
    """Each replica's stamps in the order they are chained: launch, start, in-run reductions,
    end, reductions after run."""
    n = len(rec.devices)
    inside = sorted((r for r in rec.reductions if r.inside_run), key=lambda r: r.call)
    after = sorted((r for r in rec.reductions if not r.inside_run), key=lambda r: r.call)
    seq = [np.full(n, rec.launch), rec.start]
    for red in inside:
        seq += [red.inputs_ready, red.outputs_ready]
    seq.append(rec.end)
    for red in after:
        seq += [red.inputs_ready, red.outputs_ready]
    return seq


def test_timeline_does_not_change_a_number(devices):
    """With the timeline on, a custom loop and Keras fit stay bit-identical to plain TF."""
    data = digits()
    plain_w, plain_l = train_custom(plain_mirrored(devices[:4]), data)
    ours = mt.MirroredStrategy(devices[:4], recording=mt.Recording(timeline=True))
    our_w, our_l = train_custom(ours, data)
    assert same_bits(plain_w, our_w) and plain_l == our_l
    assert len(ours.trace.timed_steps()) == 8
    plain_w, plain_h = train_fit(plain_mirrored(devices[:4]), data)
    fit = mt.MirroredStrategy(devices[:4], recording=mt.Recording.timing())
    our_w, our_h = train_fit(fit, data)
    assert same_bits(plain_w, our_w) and plain_h == our_h
    assert fit.trace.timeline().replicas == 4


def test_stamps_never_go_backwards_within_a_replica(devices):
    """Each replica's stamps are in program order, and a step launches after the last one ended."""
    s = mt.MirroredStrategy(devices[:4], recording=mt.Recording(timeline=True))
    timed_steps(s, steps=6)
    records = s.trace.timeline().records
    for rec in records:
        assert len(rec.reductions) == 2  # the gradients' all-reduce, the loss's reduce after run
        assert [r.inside_run for r in sorted(rec.reductions, key=lambda r: r.call)] == [True, False]
        seq = stamps_in_order(rec)
        assert all(np.all(b >= a) for a, b in zip(seq, seq[1:])), rec
    for a, b in zip(records, records[1:]):
        assert b.launch >= max(np.max(x) for x in stamps_in_order(a))


def test_phases_tile_each_replicas_step_without_overlap(devices):
    """Within a replica, phases never overlap; per step they add up to the step's wall time, which
    is close to the time the host measured around the steps."""
    s = mt.MirroredStrategy(devices[:4], recording=mt.Recording(timeline=True))
    walls = timed_steps(s, steps=10)
    timeline = s.trace.timeline()
    assert timeline.steps == list(range(10))
    for r in range(4):
        mine = sorted((p for p in timeline.phases if p.replica == r), key=lambda p: p.start)
        assert all(p.seconds > 0 and p.kind in KINDS for p in mine)
        assert all(a.end <= b.start + 1e-9 for a, b in zip(mine, mine[1:]))
        for step, (launch, end) in timeline.spans.items():
            total = sum(p.seconds for p in mine if p.step == step)
            assert total == pytest.approx(end - launch, abs=1e-9)
    # steps 1..8 run launch to launch; the host timed each call (returns ~ launches, shifted)
    measured = float(np.sum(timeline.step_seconds()[1:9]))
    assert measured == pytest.approx(float(np.sum(walls[1:9])), rel=0.25)


def test_a_slow_replica_shows_as_the_others_waiting(devices):
    """A replica sleeping 40 ms before the all-reduce: the others wait about that long, it does
    not; its own delay shows as compute."""
    s = mt.MirroredStrategy(devices[:4], recording=mt.Recording.timing())
    timed_steps(s, steps=6, delay_replica=2, delay=0.04)
    timeline = s.trace.timeline(s.trace.timed_steps()[2:])
    waits = [sum(p.seconds for p in timeline.phases if p.replica == r
                 and p.kind == "waiting for replicas") / len(timeline.steps) for r in range(4)]
    assert min(waits[r] for r in (0, 1, 3)) > 0.03, waits
    assert waits[2] < 0.01, waits


def test_eager_steps_are_timed_and_marked(devices):
    """strategy.run called eagerly records the same stamps, marked eager."""
    s = mt.MirroredStrategy(devices[:2], recording=mt.Recording(timeline=True))
    def replica():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce("SUM", tf.ones(3) * tf.cast(ctx.replica_id_in_sync_group, tf.float32))

    for _ in range(3):
        s.run(replica)
    timeline = s.trace.timeline()
    assert timeline.eager == [True] * 3
    assert all(rec.start is not None and len(rec.reductions) == 1 for rec in timeline.records)


def test_timeline_survives_save_and_load(devices, tmp_path):
    """The stamps are saved with the trace and read back identically."""
    s = mt.MirroredStrategy(devices[:2], recording=mt.Recording(timeline=True))
    timed_steps(s, steps=3)
    s.trace.save(tmp_path / "t.npz")
    loaded = mt.Trace.load(tmp_path / "t.npz")
    assert loaded.timeline().table() == s.trace.timeline().table()
    assert loaded.recording.timeline


def test_no_timeline_is_a_plain_error(devices):
    """Asking a trace recorded without the timeline for one says how to record it; an unknown
    phase name says which phases there are."""
    s = mt.MirroredStrategy(devices[:2])
    s.run(lambda: tf.constant(1.0))
    with pytest.raises(mt.errors.NotRecordedError, match=r"Recording\(timeline=True\)"):
        s.trace.timeline()
    timed = mt.MirroredStrategy(devices[:2], recording=mt.Recording(timeline=True))
    timed.run(lambda: tf.constant(1.0))
    with pytest.raises(mt.errors.NotRecordedError, match="no phase called 'idle'"):
        timed.trace.timeline().seconds("idle")


def test_timeline_off_adds_no_timestamp_to_the_step(devices):
    """Default recording builds no Timestamp op into a traced step: its cost cannot grow."""
    def ops_of(recording):
        s = mt.MirroredStrategy(devices[:2], recording=recording)
        fn = tf.function(lambda: s.run(lambda: tf.distribute.get_replica_context().all_reduce(
            "SUM", tf.ones(2))))
        graph = fn.get_concrete_function().graph
        return [op.type for op in graph.get_operations()]
    assert "Timestamp" not in ops_of(mt.Recording())
    assert ops_of(mt.Recording(timeline=True)).count("Timestamp") == 1 + 2 + 2 * 2 + 2


def test_timing_preset_keeps_no_tensor_values(devices):
    """Recording.timing() keeps the timeline and no shard, output, all-reduce or sync record."""
    s = mt.MirroredStrategy(devices[:4], recording=mt.Recording.timing())
    timed_steps(s, steps=3)
    assert s.trace.timed_steps() == [0, 1, 2]
    assert not s.trace.shards() and not s.trace.allreduces() and not s.trace.sync()
