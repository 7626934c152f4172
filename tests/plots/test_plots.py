"""mt.plots draws what the trace holds: one mark per example, bar or line per replica."""

from __future__ import annotations

import numpy as np
import pytest

import mirrortutor as mt
from helpers import digits, train_custom


@pytest.fixture(scope="module")
def trace(devices):
    """A short custom-loop run on 4 replicas with everything recorded."""
    strategy = mt.MirroredStrategy(devices[:4], recording=mt.Recording.everything())
    train_custom(strategy, digits(128), epochs=1)
    return strategy.trace


def test_shard_map_has_a_mark_per_example_coloured_by_replica(trace):
    """Each replica's trace holds exactly the examples it received, at the right steps."""
    fig = mt.plots.shard_map(trace)
    assert [t.name for t in fig.data] == [f"replica {r}" for r in range(4)]
    for r, t in enumerate(fig.data):
        expected = np.concatenate([trace.example_ids(s)[r] for s in trace.steps if trace.shards(s)])
        assert list(t.x) == expected.tolist()
    assert sorted(x for t in fig.data for x in t.x) == list(range(128))


def test_gradient_norms_shows_each_replica_and_the_reduced_gradient(trace):
    """One bar group per variable: the 4 local norms and the all-reduced norm."""
    fig = mt.plots.gradient_norms(trace, step=0)
    grads = trace.gradients(step=0)
    assert len(fig.data) == 5 and fig.data[-1].name == "all-reduced (applied)"
    assert fig.layout.xaxis.title.text == "variable" and fig.layout.yaxis.title.text
    kernel = [g.norm for g in grads if g.variable == grads[0].variable]
    assert [t.y[0] for t in fig.data[:4]] == pytest.approx(kernel)
    with pytest.raises(mt.errors.NotRecordedError, match="No gradients were recorded at step 999"):
        mt.plots.gradient_norms(trace, step=999)


def test_allreduce_diagram_flows_from_every_input_to_every_output(trace):
    """The Sankey has one link per replica input into the reduction and one out to each replica."""
    record = trace.allreduces(step=0, path="batch_reduce")[0]
    link = mt.plots.allreduce_diagram(record).data[0].link
    assert list(link.source) == [0, 1, 2, 3, 4, 4, 4, 4]
    assert list(link.value[:4]) == pytest.approx(record.input_norms[0].tolist())


def test_allreduce_diagram_titles_an_anonymous_gradient_by_the_name_given(trace):
    """Keras's gradients reach batch_reduce unnamed ("value 0"); name= titles them."""
    record = trace.allreduces(step=0, path="batch_reduce")[0]
    assert "value 0" in mt.plots.allreduce_diagram(record).layout.title.text
    titled = mt.plots.allreduce_diagram(record, name="the gradient of dense/kernel")
    assert "the gradient of dense/kernel" in titled.layout.title.text


def test_variable_values_draws_every_replicas_copy_and_refuses_unkept_ones(trace, devices):
    """A line per replica through the recorded steps; a variable without kept values says why."""
    name = trace.variables[1].name  # the first bias: small, so kept whole
    fig = mt.plots.variable_values(trace, name)
    assert len(fig.data) == 4 and list(fig.data[0].x) == trace.steps
    assert list(fig.data[0].y) == list(fig.data[3].y)  # in sync: the copies overlap exactly
    with pytest.raises(mt.errors.NotRecordedError, match="No values of 'nothing' were kept"):
        mt.plots.variable_values(trace, "nothing")


def test_bars_per_replica_labels_each_value():
    """One bar per value, labelled with it."""
    fig = mt.plots.bars_per_replica(np.array([1.0, 2.5]), "t", "y")
    assert list(fig.data[0].x) == ["replica 0", "replica 1"]
    assert list(fig.data[0].text) == ["1", "2.5"]


@pytest.mark.parametrize("draw", [lambda t: mt.plots.gradient_norms(t, step=0),
                                  lambda t: mt.plots.variable_values(t, "dense/kernel")],
                         ids=["gradient_norms", "variable_values"])
def test_asking_for_what_was_not_recorded_is_a_not_recorded_error(draw):
    """An empty trace has nothing to draw: NotRecordedError, which code catching ValueError sees."""
    with pytest.raises(mt.errors.NotRecordedError) as caught:
        draw(mt.Trace())
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, mt.MirrortutorError)


def test_every_chart_of_the_course_colours_replica_r_the_same():
    """Replica r has one colour in every module: the style's palette, repeating after 16."""
    from mirrortutor.plots import style

    fig = mt.plots.bars_per_replica(np.arange(18.0), "t", "y")
    assert list(fig.data[0].marker.color) == [style.colour(r) for r in range(18)]
    assert style.colour(16) == style.colour(0) == mt.plots.REPLICA_COLOURS[0]


def _made_up_timeline():
    """Two steps on 2 replicas, stamps in seconds: replica 1 reaches the all-reduce 4 ms late."""
    from mirrortutor.record.records import ReductionStamps, TimelineRecord
    from mirrortutor.record.timeline import Timeline

    records = []
    for step, t0 in ((0, 100.0), (1, 100.02)):
        red = ReductionStamps(0, True, np.array([t0 + 0.004, t0 + 0.008]),
                              np.array([t0 + 0.010, t0 + 0.010]))
        records.append(TimelineRecord(step, False, ["/cpu:0", "/cpu:1"], t0,
                                      np.array([t0 + 0.001, t0 + 0.001]),
                                      np.array([t0 + 0.012, t0 + 0.012]), [red]))
    return Timeline(records)


def test_step_timeline_draws_every_phase_as_a_bar_with_its_caption():
    """One bar per recorded phase, at its start and of its length in ms; the caption says the times
    were measured here and what a GPU's timestamps would not show."""
    timeline = _made_up_timeline()
    fig = mt.plots.step_timeline(timeline)
    bars = [(t.name, y, round(b, 6), round(x, 6)) for t in fig.data
            for y, b, x in zip(t.y, t.base, t.x)]
    phases = [(p.kind, f"replica {p.replica}", round(p.start * 1e3, 6), round(p.seconds * 1e3, 6))
              for p in timeline.phases]
    assert sorted(bars) == sorted(phases) and len(bars) == len(timeline.phases)
    waits = [b for b in bars if b[0] == "waiting for replicas" and b[1] == "replica 0"]
    assert [w[3] for w in waits] == pytest.approx([4.0, 4.0])  # replica 0 waits for replica 1
    text = " ".join(a.text for a in fig.layout.annotations)
    assert "logical CPU devices" in text and "profiler" in text, text
    only_one = mt.plots.step_timeline(timeline, steps=[1])
    assert sum(len(t.x) for t in only_one.data) == sum(p.step == 1 for p in timeline.phases)
