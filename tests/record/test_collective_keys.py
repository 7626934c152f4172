"""A second replica count in one process: fails as in TensorFlow, until one visible line.

TensorFlow's ``MirroredStrategy`` numbers its collective groups from the class attribute
``_collective_key_base`` (0 unless set), so after a 2-replica all-reduce a 3-replica one joins the
same group and fails (``MirroredExtended._make_collective_ops_with_fallbacks``,
tensorflow/python/distribute/mirrored_strategy.py). mirrortutor's recording strategy must fail
there too (it used to give every instance keys of its own, a workaround hidden in the drop-in), and
``mt.new_collective_keys()`` is the one line that makes both work. Each case runs in a fresh
interpreter: a failed collective leaves the process's collectives aborted for good.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import json, sys
    import mirrortutor as mt
    import tensorflow as tf
    devices = mt.setup(4, quiet=True)
    cls = mt.MirroredStrategy if sys.argv[1] == "mt" else tf.distribute.MirroredStrategy
    results = []
    for n in (2, 3):
        if sys.argv[2] == "new":
            mt.new_collective_keys()
        strategy = cls(devices[:n])

        @tf.function
        def step():
            return strategy.run(
                lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.0)))
        try:
            results.append([float(x) for x in strategy.experimental_local_results(step())])
        except tf.errors.OpError as error:
            results.append({"error": type(error).__name__, "message": str(error)})
    print("RESULT" + json.dumps(results))
''')


def _run(kind: str, keys: str) -> list:
    done = subprocess.run([sys.executable, "-c", SCRIPT, kind, keys], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


@pytest.mark.parametrize("kind", ["tf", "mt"])
def test_a_second_replica_count_fails_its_first_allreduce(kind):
    """Stock TF and the recording strategy alike: 2 replicas all-reduce, then 3 replicas in the
    same process fail at their first all-reduce with TensorFlow's own runtime error. Stock TF
    reports the cause (an InternalError: 'joining a group with size3, but that group has size 2');
    in the recorded step, whose graph has more parts (the recording's copies to the host), TF's
    runtime may report the CancelledError of a part it stopped instead: both are TF's own errors,
    and nothing in mirrortutor catches or changes them."""
    first, second = _run(kind, "same")
    assert first == [2.0, 2.0]
    assert isinstance(second, dict), f"{kind}: the 3-replica all-reduce ran: {second}"
    if kind == "tf":
        assert second["error"] == "InternalError"
        assert "joining a group with size3, but that group has size 2" in second["message"]
    else:
        assert second["error"] in ("InternalError", "CancelledError"), second
        if second["error"] == "InternalError":
            assert "joining a group with size3, but that group has size 2" in second["message"]


@pytest.mark.parametrize("kind", ["tf", "mt"])
def test_new_collective_keys_lets_the_second_count_run(kind):
    """With mt.new_collective_keys() before each strategy, stock TF's and the recording
    strategy's all-reduces both run and sum over every replica: 2, then 3."""
    assert _run(kind, "new") == [[2.0, 2.0], [3.0, 3.0, 3.0]]


def test_measuring_leaves_the_students_key_base_alone():
    """mirrortutor's own measurements make TF strategies with keys of their own, and put back the
    base the student's next strategy uses."""
    import tensorflow as tf

    import mirrortutor as mt
    from mirrortutor.record.tf_internals.hooks import plain_mirrored_strategy

    devices = mt.setup(8, quiet=True)
    mt.new_collective_keys()
    base = tf.distribute.MirroredStrategy._collective_key_base
    assert base != 0
    plain_mirrored_strategy(devices[:2])
    assert tf.distribute.MirroredStrategy._collective_key_base == base
    # chapter 04b measures 2, 4 and 8 replicas after its own strategies: every count runs
    timings = mt.measure.time_allreduce(devices, implementations=("default",), replicas=(2, 4, 3),
                                        sizes=(4096,), repeats=1, warmup=0)
    assert sorted(r.replicas for r in timings.rows) == [2, 3, 4] and not timings.unavailable
    assert tf.distribute.MirroredStrategy._collective_key_base == base
