"""LocalCluster: real ps and worker tasks on this machine, started, used, broken and stopped.

A cluster connects its coordinator's eager context to the cluster for the rest of the process (TF
cannot undo that), so every scenario runs in a fresh interpreter, as in a fresh notebook kernel,
and reports what it saw as JSON. Each test below checks one part of that report. The main scenario
runs as the course's kernel does, in a private network namespace (``unshare -rn``); who can reach
the course's ports from elsewhere is ``test_exposure.py``'s business.
"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

import mirrortutor as mt
from mirrortutor.clusters.processes import netns_available
from mirrortutor.clusters.ps import LocalCluster
from mirrortutor.errors import ClusterConfigError

from conftest import run_python

# Shared by the scenarios: the host's listening TCP ports (from /proc, both address families),
# and whether a port answers on an address.
PRELUDE = r'''
import json, os, socket, subprocess, threading, time, warnings
import mirrortutor as mt
mt.setup(8, quiet=True)
import keras, tensorflow as tf
from mirrortutor.clusters.ps import LocalCluster
warnings.simplefilter("ignore")
report = {}

def listening():
    """{port: [local addresses]} of every listening TCP socket in this network namespace."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(name).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":  # LISTEN
                addr, port = local.split(":")
                out.setdefault(int(port, 16), []).append(addr)
    return out

def answers(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False

def host_addresses():
    """This machine's own non-loopback addresses (never anything external)."""
    words = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [w for w in words if not w.startswith("127.") and w != "::1"]

def model_fn():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(10)])

def children():
    """Pids of this process's living children (read from /proc)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(command)": state, ppid, ...
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            out.append(int(pid))
    return out

data = mt.data.digits().take(512)

class Training:
    """Plain TensorFlow parameter-server training on the cluster's own strategy and coordinator,
    as TF's tutorial writes it: SGD steps scheduled on whichever worker is free. Each step returns
    the index of the worker that ran it (TF's experimental_get_current_worker_index), so the
    results say which steps ran, and where. ``slow_worker``: that worker (or each of a tuple of
    workers) waits ``delay`` seconds in every step it runs (mt.straggle)."""

    def __init__(self, cluster, slow_worker=None, delay=0.0):
        self.strategy, self.coordinator = cluster.strategy, cluster.coordinator
        with self.strategy.scope():
            self.model = model_fn()
            self.optimizer = keras.optimizers.SGD(0.1)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        x, y = data.x, data.y

        def dataset_fn():
            return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=1).repeat().batch(32)

        self.iterator = iter(self.coordinator.create_per_worker_dataset(dataset_fn))
        model, optimizer, strategy = self.model, self.optimizer, self.strategy

        @tf.function
        def step(iterator):
            def replica_fn(batch):
                features, labels = batch
                for slow in ((slow_worker,) if isinstance(slow_worker, int) else slow_worker or ()):
                    features = mt.straggle(features, delay, worker=slow)
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(loss_fn(labels, model(features)))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            strategy.run(replica_fn, args=(next(iterator),))
            return tf.distribute.coordinator.experimental_get_current_worker_index()

        self.step, self.results = step, []

    def schedule(self, steps):
        self.results += [self.coordinator.schedule(self.step, args=(self.iterator,))
                         for _ in range(steps)]

    def join(self):
        """Wait for every scheduled step; the worker that ran each, in schedule order."""
        self.coordinator.join()
        return [int(r.fetch()) for r in self.results]

    def fit(self, steps):
        self.schedule(steps)
        return self.join()
'''

PROCESS_SCENARIO = PRELUDE + r'''
ports_before = set(listening())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cluster = LocalCluster(workers=2, ps=1, mode="process").start()
report["warnings"] = [str(w.message) for w in caught]
info = cluster.info
report["info"] = {"contained": info.contained, "exposed": info.exposed_ports,
                  "start_seconds": info.start_seconds}
task_ports = [int(a.rsplit(":", 1)[1]) for j in ("worker", "ps") for a in info.spec[j]]
chief_port = int(info.spec["chief"][0].rsplit(":", 1)[1])
now = listening()
report["task_listen_addresses"] = sorted({a for p in task_ports for a in now.get(p, [])})
report["task_answers_loopback"] = [answers("127.0.0.1", p) for p in task_ports]
report["host_addresses"] = host_addresses()
report["task_answers_elsewhere"] = [answers(h, p) for h in host_addresses() for p in task_ports]
report["chief_answers_elsewhere"] = [answers(h, chief_port) for h in host_addresses()]
training = Training(cluster)
t0 = time.monotonic()
ran = training.fit(40)
report["first_fit"] = {"ran": len(ran), "workers": sorted(set(ran)),
                       "seconds": time.monotonic() - t0}
t0 = time.monotonic()
training.fit(200)
report["steps_per_second"] = 200 / (time.monotonic() - t0)
try:
    cluster.start()
except Exception as e:
    report["started_twice"] = [type(e).__name__, str(e)]
try:
    LocalCluster(workers=1, ps=1).start()
except Exception as e:
    report["second_cluster"] = [type(e).__name__, str(e)]
try:
    cluster.kill_worker(5)
except Exception as e:
    report["kill_missing"] = [type(e).__name__, str(e)]

# Worker failure: kill worker 1 while steps are queued, bring it back, keep training.
training = Training(cluster)
training.schedule(200)
time.sleep(0.5)
cluster.kill_worker(1)
time.sleep(1.0)
cluster.restart_worker(1)
training.schedule(100)
ran = training.join()
asked, deadline = 300, time.monotonic() + 90
# The coordinator takes the restarted worker back when its own polling finds it: keep training
# (bounded) until it does, since 100 quick steps can all end on worker 0 before that.
while 1 not in ran[200:] and time.monotonic() < deadline:
    training.schedule(50)
    ran, asked = training.join(), asked + 50
report["kill"] = {"ran": len(ran), "asked": asked, "workers": sorted(set(ran)),
                  "worker1_after_restart": ran[200:].count(1)}
agent_children = children()
cluster.stop()
time.sleep(0.5)
report["children_after_stop"] = children()
report["children_while_running"] = len(agent_children)
after = listening()
report["task_ports_listening_after"] = [p for p in task_ports if p in after]
report["new_listeners_after"] = sorted(set(after) - ports_before - {chief_port})

# A taken port, then a second cluster in the same kernel.
taken = socket.socket()
taken.bind(("127.0.0.1", 0)); taken.listen(1)
try:
    LocalCluster(workers=1, ps=1, ports=[taken.getsockname()[1], taken.getsockname()[1] + 1]).start()
except Exception as e:
    report["taken_port"] = [type(e).__name__, str(e)]
taken.close()
# Started from a helper thread that then ends: the cluster must live on until stopped.
box = {}
starter = threading.Thread(target=lambda: box.update(cluster=LocalCluster(workers=2, ps=1).start()))
starter.start()
starter.join()
time.sleep(1.0)
again = box["cluster"]  # already started: stop it at the end, as `with` would
try:
    ran = Training(again).fit(20)
    report["second_start"] = {"ran": len(ran), "start_seconds": again.info.start_seconds}
    second_ports = [int(a.rsplit(":", 1)[1]) for j in ("worker", "ps") for a in again.info.spec[j]]
finally:
    again.stop()
time.sleep(0.5)
report["children_at_end"] = children()
after = listening()
report["second_ports_listening_after"] = [p for p in second_ports if p in after]
from mirrortutor.progress import FINISHED
report["progress"] = [[f.description, f.done, f.total] for f in FINISHED]
report["coordinator_log"] = list(cluster.coordinator_log)
print("REPORT" + json.dumps(report))
'''


def _report(code: str, timeout: float = 240, contained: bool = False) -> dict:
    result = run_python(code, timeout=timeout, contained=contained)
    lines = [x for x in result.stdout.splitlines() if x.startswith("REPORT")]
    assert lines, f"scenario failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    report = json.loads(lines[-1][len("REPORT"):])
    report["stderr_lines"] = result.stderr.splitlines()
    return report


@pytest.fixture(scope="module")
def process_report() -> dict:
    return _report(PROCESS_SCENARIO, contained=netns_available())


# ---- bad input that needs no cluster --------------------------------------------------------
@pytest.mark.parametrize("workers, ps", [(0, 1), (2, 0), (-1, 1), (1.5, 1), (True, 1)])
def test_zero_or_bad_task_counts_are_refused(workers, ps):
    """Zero (or non-integer) workers or ps raise ClusterConfigError before anything starts."""
    with pytest.raises(ClusterConfigError, match="at least 1"):
        LocalCluster(workers=workers, ps=ps)


def test_unknown_mode_and_bad_ports_are_refused():
    """A mode other than process/in_process, or the wrong number of ports, is refused."""
    with pytest.raises(ClusterConfigError, match="mode must be"):
        LocalCluster(mode="threads")
    with pytest.raises(ClusterConfigError, match="ports must list 3"):
        LocalCluster(workers=2, ps=1, ports=[1234])
    assert issubclass(ClusterConfigError, mt.MirrortutorError)


# ---- one process-mode kernel: lifecycle, containment, failure -------------------------------
def test_process_cluster_trains_and_stops_clean(process_report):
    """A process cluster runs every scheduled step (on both workers), and on exit leaves no child
    process and no task port."""
    r = process_report
    assert r["first_fit"]["ran"] == 40 and set(r["first_fit"]["workers"]) <= {0, 1}
    assert r["children_while_running"] >= 1
    assert r["children_after_stop"] == []
    assert r["task_ports_listening_after"] == []
    assert r["new_listeners_after"] == []


def test_cluster_start_shows_progress_to_its_end(process_report):
    """Starting a cluster shows a bar over its tasks (and the connect), which reaches its end."""
    bars = process_report["progress"]
    starts = [b for b in bars if b[0] == "starting the cluster"]
    assert starts and all(done == total == 4 for _, done, total in starts)  # 2 workers, 1 ps, +1


def test_cluster_starts_again_in_the_same_kernel(process_report):
    """After one cluster stops, a second starts in the same kernel, trains, and stops clean; it
    was started from a helper thread that ended first (clusters live until stopped)."""
    r = process_report
    assert r["second_start"]["ran"] == 20
    assert r["children_at_end"] == []
    assert r["second_ports_listening_after"] == []


@pytest.mark.skipif(not netns_available(), reason="no unprivileged network namespaces here")
def test_in_a_private_network_nothing_is_exposed(process_report):
    """In a kernel whose network is private, the cluster says so: contained, no exposed port, no
    ExposedPortWarning, and every task answers on the shared loopback."""
    r = process_report
    assert r["info"]["contained"] is True and r["info"]["exposed"] == []
    assert r["warnings"] == []
    assert all(r["task_answers_loopback"])
    assert r["host_addresses"] == []  # the namespace has no address but its loopback


def test_worker_kill_then_restart(process_report):
    """A killed worker does not stop training: TF runs its steps elsewhere (or again), so every
    scheduled step returns a result; the restarted worker rejoins."""
    k = process_report["kill"]
    assert k["ran"] == k["asked"] >= 300 and k["workers"] == [0, 1]
    assert k["worker1_after_restart"] > 0


def test_started_twice_and_two_clusters_are_refused(process_report):
    """start() on a running cluster, or a second cluster while one runs, raises ClusterStateError."""
    r = process_report
    assert r["started_twice"][0] == "ClusterStateError" and "already running" in r["started_twice"][1]
    assert r["second_cluster"][0] == "ClusterStateError" and "still running" in r["second_cluster"][1]
    assert r["kill_missing"][0] == "WorkerIndexError" and "workers 0 to 1" in r["kill_missing"][1]


def test_taken_port_is_refused(process_report):
    """A port already bound by someone else raises ClusterConfigError naming the port."""
    name, message = process_report["taken_port"]
    assert name == "ClusterConfigError" and "already in use" in message


# ---- in-process mode and interrupts: each in its own kernel ---------------------------------
IN_PROCESS_SCENARIO = PRELUDE + r'''
with LocalCluster(workers=2, ps=1, mode="in_process") as cluster:
    first_spec = cluster.info.spec
    report["start_seconds"] = cluster.info.start_seconds
    report["exposed"] = len(cluster.info.exposed_ports)
    t0 = time.monotonic()
    ran = Training(cluster).fit(200)
    report["steps_per_second"] = 200 / (time.monotonic() - t0)
    report["ran"] = len(ran)
with LocalCluster(workers=2, ps=1, mode="in_process") as cluster:
    report["reused"] = cluster.info.spec == first_spec
    report["ran_again"] = len(Training(cluster).fit(20))
try:
    LocalCluster(mode="process").start()
except Exception as e:
    report["switch"] = [type(e).__name__, str(e)]
print("REPORT" + json.dumps(report))
'''


def test_in_process_cluster_runs_and_is_reused():
    """In-process tasks run every step; a second cluster reuses them; switching mode is refused."""
    r = _report(IN_PROCESS_SCENARIO)
    assert r["ran"] == 200 and r["ran_again"] == 20 and r["reused"]
    assert r["exposed"] == 4  # coordinator + 2 workers + 1 ps: all on every interface
    assert r["switch"][0] == "ClusterStateError" and "Restart the kernel" in r["switch"][1]


INTERRUPT_SCENARIO = PRELUDE + r'''
import _thread, signal, threading
# Ctrl-C raises KeyboardInterrupt, as in a kernel (ipykernel handles SIGINT): a run started in a
# shell's background (`make test &`) inherits SIGINT ignored, and then nothing is interrupted.
signal.signal(signal.SIGINT, signal.default_int_handler)
cluster = LocalCluster(workers=2, ps=1)
try:
    with cluster:
        training = Training(cluster, slow_worker=0, delay=0.02)
        training.schedule(500)
        # As Kernel → Interrupt does, while the cell waits for the steps (scheduling them is
        # quick; an interrupt inside TF's own scope bookkeeping is not what a student meets).
        threading.Timer(1.0, _thread.interrupt_main).start()
        training.join()
    report["interrupted"] = False
except KeyboardInterrupt:
    report["interrupted"] = True
report["children_after_interrupt"] = children()
with LocalCluster(workers=2, ps=1) as cluster:
    report["ran_after"] = len(Training(cluster).fit(20))
print("REPORT" + json.dumps(report))
'''


def test_interrupt_mid_training_then_a_new_cluster_starts():
    """Ctrl-C during training stops the cluster (no child left), and the next cluster runs every
    step it is given."""
    r = _report(INTERRUPT_SCENARIO)
    assert r["interrupted"] is True
    assert r["children_after_interrupt"] == []
    assert r["ran_after"] == 20


def test_no_stray_processes_or_listeners_in_this_process():
    """The pytest process itself never started a cluster: no cluster agent among its descendants.
    Only this process's own tree is looked at: `make test` runs two pytest workers side by side,
    and the other one may be running a cluster of its own right now."""
    import psutil  # a dependency of ipykernel

    def args(process: psutil.Process) -> str:
        try:
            return " ".join(process.cmdline())
        except psutil.Error:  # gone since it was listed
            return ""

    mine = [a for a in map(args, psutil.Process().children(recursive=True))
            if "mirrortutor.clusters.agent" in a]
    assert mine == []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # the loopback still hands out ports
    sock.close()


def test_the_coordinators_failure_messages_are_kept_not_printed(process_report):
    """TF's coordinator's 'Worker ... failed' lines (logged by its threads whenever they notice,
    often cells later) land in cluster.coordinator_log, not in whichever cell runs next."""
    assert any("failed" in line for line in process_report["coordinator_log"])
    assert not any("Worker /job:worker" in line for line in process_report["stderr_lines"])
