"""mt.ParameterServerStrategy and mt.ClusterCoordinator on a real process-mode cluster.

TensorFlow's tutorial program (``programs/ps_tutorial.py``, plain TF) runs twice in one fresh
interpreter connected to a ``mt.LocalCluster`` of 2 workers and 2 ps: under stock TensorFlow, then
under ``record`` (the substitution). Asynchronous training is not deterministic from run to run,
so the two runs are not compared bit for bit; the tests check what must hold: the program runs
the same way, TF places its variables the same way, and every scheduled function is in the log
with a worker in range and versions that add up.
"""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

import mirrortutor as mt
from mirrortutor.errors import RecordingTypeError
from mirrortutor.record.substitute import substituted

from conftest import run_python

STEPS = 40
PROGRAM = __file__.rsplit("/", 1)[0] + "/programs/ps_tutorial.py"

SCENARIO = r'''
import json, os, tempfile, warnings
import mirrortutor as mt
mt.setup(2, quiet=True)
import tensorflow as tf
from mirrortutor.clusters.ps import LocalCluster
from mirrortutor.record.program import run_program
warnings.simplefilter("ignore")
report, tmp = {}, tempfile.mkdtemp()
with LocalCluster(workers=2, ps=2) as cluster:
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster.info.spec,
                                          "task": {"type": "chief", "index": 0}})
    stock = run_program(PROGRAM, [f"{tmp}/stock.json", str(STEPS)], out=None)
    recorded = run_program(PROGRAM, [f"{tmp}/rec.json", str(STEPS)], out=f"{tmp}/traces")
    report["errors"] = [stock.error_text, recorded.error_text]
    report["stock"], report["recorded"] = [json.load(open(f"{tmp}/{n}.json"))
                                           for n in ("stock", "rec")]
    report["kinds"] = [type(s).__name__ for s in recorded.strategies]
    trace = recorded.strategies[0].trace
    loaded = mt.Trace.load(recorded.files[0])
    report["trace"] = {
        "functions": [[f.schedule, f.worker, f.version_read, f.version_written, f.started,
                       f.ended] for f in trace.functions],
        "scheduled": trace.scheduled, "failures": len(trace.failures), "pending": trace.pending,
        "versions_counted": trace.versions_counted, "unlogged": trace.unlogged_versions(),
        "placements": [[p.name, p.devices, p.ps_tasks] for p in trace.placements],
        "summary": trace.summary()}
    report["loaded_same"] = (type(loaded).__name__ == "ParameterServerTrace"
                             and loaded.summary() == trace.summary()
                             and loaded.functions == trace.functions
                             and loaded.placements == trace.placements)
    # A sharded variable: one placement record, one device per shard, as TF placed them.
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    sharded = mt.ParameterServerStrategy(
        resolver, variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(2))
    with sharded.scope():
        v = tf.Variable(tf.zeros((6, 3)), name="table")
    p = sharded.trace.placements[0]
    report["sharded"] = [p.devices, [s.device for s in v.variables], p.shard_shapes, p.shape,
                         p.name]
    # TF's own strategy given to the recording coordinator: a plain error, not a silent no-log.
    try:
        mt.ClusterCoordinator(tf.distribute.ParameterServerStrategy(resolver))
    except Exception as e:
        report["plain_strategy"] = [type(e).__name__, str(e)]
print("REPORT" + json.dumps(report))
'''.replace("PROGRAM", repr(PROGRAM)).replace("STEPS", str(STEPS))

KILL_SCENARIO = r'''
import json, time, warnings
import mirrortutor as mt
mt.setup(2, quiet=True)
import tensorflow as tf
from mirrortutor.clusters.ps import LocalCluster
warnings.simplefilter("ignore")
report = {}
with LocalCluster(workers=2, ps=1) as cluster:
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster.info.spec), rpc_layer="grpc")
    strategy = mt.ParameterServerStrategy(resolver)
    with strategy.scope():
        w = tf.Variable(tf.zeros((32, 32)))

    @tf.function
    def work():
        x = tf.random.normal((32, 32))
        for _ in range(10):
            x = tf.tanh(x @ (w + 1e-3))
        w.assign_add(1e-6 * x)

    # Made after the scope was entered (TF then already made one): still the recording one.
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    report["coordinator"] = type(coordinator).__module__
    values = [coordinator.schedule(work) for _ in range(150)]
    while strategy.trace.steps_run + len(strategy.trace.failures) < 20:
        time.sleep(0.005)
    cluster.kill_worker(1)
    cluster.restart_worker(1)  # TF picks it up again by itself
    coordinator.join()
    report["fetched"] = [v.fetch() for v in values[:3]]  # work returns None, as in plain TF
    t = strategy.trace
    report["killed"] = {"scheduled": t.scheduled, "logged": sorted(f.schedule for f in t.functions),
                        "failures": len(t.failures), "counted": t.versions_counted,
                        "written": sorted(f.version_written for f in t.functions),
                        "unlogged": t.unlogged_versions(), "repeated": t.repeated_versions(),
                        "summary": t.summary()}
print("REPORT" + json.dumps(report))
'''


def _report(code: str) -> dict:
    result = run_python(code, timeout=240)
    lines = [x for x in result.stdout.splitlines() if x.startswith("REPORT")]
    assert lines, f"scenario failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return json.loads(lines[-1][len("REPORT"):])


@pytest.fixture(scope="module")
def report() -> dict:
    return _report(SCENARIO)


@pytest.fixture(scope="module")
def killed() -> dict:
    return _report(KILL_SCENARIO)


def test_the_coordinator_records_however_it_is_made(killed):
    """TF makes a coordinator at the strategy's first scope() and returns that one from
    ClusterCoordinator(strategy) after; the recording strategy's is the recording one, so TF's
    own class, called after the model was built in scope, gives it too. A function returning
    None gives None, as in plain TF."""
    assert killed["coordinator"] == "mirrortutor.record.parameter_server"
    assert killed["fetched"] == [None, None, None]


def test_the_program_runs_the_same_under_stock_tf_and_recorded(report):
    """Both runs end without error and every scheduled step returned a finite loss."""
    assert report["errors"] == ["", ""]
    assert report["kinds"] == ["ParameterServerStrategy"]
    for run in ("stock", "recorded"):
        losses = report[run]["losses"]
        assert len(losses) == STEPS and all(l == l and abs(l) < 1e6 for l in losses)


def test_the_recording_leaves_tf_placement_as_it_was(report):
    """Its version counter is made outside TF's round robin: every variable of the program is on
    the same ps task with and without the recording."""
    devices = lambda run: [d for _, d in report[run]["placement"]]  # noqa: E731
    assert devices("stock") == devices("recorded")
    assert len(set(devices("stock"))) == 2  # both ps tasks hold variables


def test_placement_matches_every_variables_device(report):
    """The trace's placement of each variable is the device TF gives it (var.device)."""
    recorded = {name: device for name, device in report["recorded"]["placement"]}
    placed = {name: devices[0] for name, devices, _ in report["trace"]["placements"]}
    assert placed == recorded
    for _, devices, tasks in report["trace"]["placements"]:
        assert tasks == [int(d.split("task:")[1].split("/")[0]) for d in devices]


def test_a_sharded_variable_is_placed_shard_by_shard(report):
    """One record per sharded variable, under the program's name (TF calls the whole
    "ShardedVariable" and its shards "table/part_0", "table/part_1")."""
    devices, actual, shapes, shape, name = report["sharded"]
    assert devices == actual and len(devices) == 2 and devices[0] != devices[1]
    assert shapes == [[3, 3], [3, 3]] and shape == [6, 3]
    assert name == "table"


def test_every_scheduled_function_is_logged_once_with_its_worker(report):
    """Every schedule call ran and is logged exactly once, by a worker of the cluster."""
    trace = report["trace"]
    functions = trace["functions"]
    assert trace["scheduled"] == STEPS and trace["failures"] == 0 and trace["pending"] == 0
    assert sorted(f[0] for f in functions) == list(range(STEPS))
    assert all(f[1] in (0, 1) for f in functions)
    assert all(f[4] <= f[5] for f in functions)  # started before it ended, on one clock


def test_versions_read_precede_versions_written_and_each_is_written_once(report):
    """Each function wrote its own version (1..n, none twice, none lost: no failures here), and
    read one older than it wrote."""
    trace = report["trace"]
    written = sorted(f[3] for f in trace["functions"])
    assert written == list(range(1, STEPS + 1)) and trace["versions_counted"] == STEPS
    assert trace["unlogged"] == []
    assert all(0 <= f[2] < f[3] for f in trace["functions"])


def test_a_worker_killed_mid_run_leaves_every_function_logged_once_and_lost_runs_flagged(killed):
    """After a worker dies, TF runs the function it was running again on another worker. Each
    schedule is still logged once (the log is the coordinator's copy of the results); a run whose
    update reached the ps but whose results were lost shows as a version counted and never
    logged, and the counts add up: counted = logged + unlogged, no version written twice."""
    killed = killed["killed"]
    assert killed["scheduled"] == 150 and killed["failures"] == 0
    assert killed["logged"] == list(range(150))
    assert killed["repeated"] == []
    assert killed["counted"] == 150 + len(killed["unlogged"])
    assert sorted(killed["written"] + killed["unlogged"]) == list(range(1, killed["counted"] + 1))
    if killed["unlogged"]:
        assert "with no logged function" in killed["summary"]


def test_the_trace_file_keeps_the_log(report):
    assert report["loaded_same"]
    assert "Added by the recording: the counter mirrortutor_version" in report["trace"]["summary"]


def test_tfs_own_strategy_given_to_the_recording_coordinator_is_refused(report):
    name, message = report["plain_strategy"]
    assert name == "RecordingTypeError" and "mt.ParameterServerStrategy" in message


# ---- no cluster needed --------------------------------------------------------------------------
def test_substitution_swaps_and_restores_the_parameter_server_classes():
    names = [("distribute", "ParameterServerStrategy"),
             ("distribute", "experimental", "ParameterServerStrategy"),
             ("distribute", "coordinator", "ClusterCoordinator"),
             ("distribute", "experimental", "coordinator", "ClusterCoordinator")]

    def look(path):
        value = tf
        for part in path:
            value = getattr(value, part)
        return value

    before = [look(p) for p in names]
    with substituted():
        during = [look(p) for p in names]
        assert all(d is not b and issubclass(d, b) for d, b in zip(during, before))
        assert issubclass(during[0], mt.ParameterServerStrategy)
        assert issubclass(during[2], mt.ClusterCoordinator)
        assert during[0].__name__ == "ParameterServerStrategy"
    assert [look(p) for p in names] == before


@pytest.mark.parametrize("recording", ["everything", 3, {"first_steps": 1}])
def test_a_recording_that_is_not_a_recording_is_refused(recording):
    """Checked before TensorFlow connects to any cluster (so no cluster is needed here)."""
    with pytest.raises(RecordingTypeError, match="must be an mt.Recording"):
        mt.ParameterServerStrategy(None, recording=recording)
    assert issubclass(RecordingTypeError, TypeError)
