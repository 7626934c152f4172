"""MultiWorkerCluster and mt.MultiWorkerMirroredStrategy: real worker processes, one plain TF program.

The workers are child processes with their own TF_CONFIG, each running chapter 08's program
(``programs/08_worker.py``) unchanged; this pytest process only launches them and reads what they
leave, so its own eager context never joins a cluster (a test checks that). The runs are shared by
the tests below (each start costs a few seconds on 2 cores).
"""

from __future__ import annotations

import glob
import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor.clusters.processes import netns_available
from mirrortutor.record.multiworker import MultiWorkerMirroredStrategy
from mirrortutor.record.tf_internals.cluster import connected_to_cluster as in_cluster
from mirrortutor.clusters.multiworker import BASE_PORT, MultiWorkerCluster, tf_config
from mirrortutor.errors import (ClusterConfigError, ClusterStateError, ReplicaCountError,
                                WorkerIndexError)

ROOT = Path(__file__).resolve().parents[2]
WORKER = str(ROOT / "programs" / "08_worker.py")  # chapter 08's program, unchanged
STEPS = str(ROOT / "tests" / "clusters" / "programs" / "steps.py")  # as long as asked
STEPS_RUN, EVERY, BATCH = 8, 4, 64


def _args(data: Path, checkpoints: Path, out: Path, *more: str) -> list[str]:
    return ["--data", str(data), "--steps", str(STEPS_RUN), "--global-batch", str(BATCH),
            "--checkpoint-dir", str(checkpoints), "--checkpoint-every", str(EVERY),
            "--out", str(out), *more]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One 2-worker cluster running 08_worker.py: a clean run, a run with worker 1 killed in step
    6, and that run resumed from its checkpoints (each recorded, every step)."""
    tmp = tmp_path_factory.mktemp("mw")
    digits = mt.data.load("digits").take(512)
    np.savez(tmp / "train.npz", x=digits.x, y=digits.y)  # as chapter 08's notebook saves it
    recording = mt.Recording(first_steps=STEPS_RUN)
    scratch_before = set(glob.glob(os.path.join(tempfile.gettempdir(), "mirrortutor-*")))
    with MultiWorkerCluster(workers=2) as cluster:
        clean = cluster.run_program(WORKER, *_args(tmp / "train.npz", tmp / "ckpt_clean",
                                                   tmp / "out_clean"), recording=recording)
        killed = cluster.run_program(WORKER, *_args(tmp / "train.npz", tmp / "ckpt",
                                                    tmp / "out_killed"),
                                     kill_worker=1, at_step=6, recording=recording)
        checkpoints = sorted(os.listdir(tmp / "ckpt"))
        resumed = cluster.run_program(WORKER, *_args(tmp / "train.npz", tmp / "ckpt",
                                                     tmp / "out_resumed"), recording=recording)
        directory = cluster.directory
        configs = cluster.tf_configs()
    print(f"\nclean run {clean.seconds:.1f} s, killed {killed.seconds:.1f} s, "
          f"resumed {resumed.seconds:.1f} s")
    return {"clean": clean, "killed": killed, "resumed": resumed, "directory": directory,
            "checkpoints": checkpoints, "final_checkpoints": sorted(os.listdir(tmp / "ckpt")),
            "configs": configs, "tmp": tmp, "new_temp_dirs": _new_scratch(scratch_before,
                                                                          directory)}


def _weights(folder: Path, worker: int) -> list[np.ndarray]:
    with np.load(folder / f"weights-worker{worker}.npz") as w:
        return [w[k] for k in w.files]


def _losses(run, worker: int) -> dict[int, float]:
    """step -> loss, from the lines the program printed ("worker0 step 3 loss 2.1")."""
    found = re.findall(r"^\w+ step (\d+) loss (\S+)$", run.workers[worker].stdout, re.M)
    return {int(step): float(loss) for step, loss in found}


def _new_scratch(before: set[str], own: str) -> set[str]:
    """mirrortutor folders in the temp dir that were not there ``before``: the cluster's own run
    folder ``own`` and any scratch. Another cluster's run folder (a test run beside this one on
    the same machine) is not this cluster's leftover."""
    new = set(glob.glob(os.path.join(tempfile.gettempdir(), "mirrortutor-*"))) - before
    return {d for d in new if d == own or not os.path.basename(d).startswith("mirrortutor-mw-")}


def _listening_ports(net_tcp_paths) -> set[int]:
    ports = set()
    for path in net_tcp_paths:
        for line in open(path).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":  # LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


def _host_addresses() -> list[str]:
    words = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [w for w in words if not w.startswith("127.") and w != "::1"]


# ---- one synchronous program over two processes ------------------------------------------------
def test_two_workers_finish_with_identical_weights(runs):
    """Both worker processes run every step and end with bit-identical weights and the same
    losses; worker 0 is the chief; each worker's trace has its one replica of 2 in sync."""
    run, out = runs["clean"], runs["tmp"] / "out_clean"
    assert run.ok, run.summary()
    assert _losses(run, 0) == _losses(run, 1) and sorted(_losses(run, 0)) == list(range(STEPS_RUN))
    for a, b in zip(_weights(out, 0), _weights(out, 1)):
        np.testing.assert_array_equal(a, b)
    assert [w.stdout.split()[0] for w in run.workers] == ["worker0", "worker1"]
    assert run.summary().splitlines()[1].split()[1] == "chief"
    assert [run.traces.replicas(w) for w in (0, 1)] == [1, 1]


def test_launching_process_never_joins_the_cluster(runs):
    """The process that launched the workers has no server: its eager context is untouched."""
    assert runs["clean"].ok
    assert not in_cluster()


def test_each_worker_ran_with_the_documented_tf_config(runs):
    """Every worker was given exactly tf_config(addresses, index), and ran as that task."""
    run = runs["clean"]
    addresses = [f"localhost:{BASE_PORT + i}" for i in range(2)]
    for i, w in enumerate(run.workers):
        assert run.tf_configs[i] == tf_config(addresses, i) == runs["configs"][i]
        assert w.worker == i and w.stdout.startswith(f"worker{i} step 0 ")
    assert tf_config(["a:1", "b:2"], 1) == {"cluster": {"worker": ["a:1", "b:2"]},
                                            "task": {"type": "worker", "index": 1}}


# ---- the merged trace ------------------------------------------------------------------------
def test_every_example_goes_to_exactly_one_worker(runs):
    """Over both workers' traces, step s's 64 examples are 64s..64s+63, each seen once (DATA policy)."""
    run = runs["clean"]
    for step in range(STEPS_RUN):
        seen = np.concatenate([ids for w in (0, 1)
                               for ids in run.trace(w).example_ids(step).values()])
        assert sorted(seen.tolist()) == list(range(BATCH * step, BATCH * step + BATCH))
    assert "replica_id_in_sync_group" in run.traces.shard_table(0)


def test_cross_worker_allreduce_sums_every_worker(runs):
    """Each worker records its local gradients; the all-reduced value is their sum over both
    workers, the same on each."""
    run = runs["clean"]
    for step in (0, STEPS_RUN - 1):
        assert run.traces.allreduce_error(step) < 1e-6
        for w in (0, 1):
            assert len(run.trace(w).gradients(step)) == 4  # 4 trainable variables × 1 replica
        outs = [run.trace(w).reduced_gradients(step) for w in (0, 1)]
        for name in outs[0]:
            np.testing.assert_array_equal(outs[0][name], outs[1][name])
    impls = {a.implementation for w in (0, 1) for a in run.trace(w).allreduces(0)}
    assert impls == {"CollectiveAllReduce (RING)"}


def test_sync_check_shows_no_drift_across_workers(runs):
    """After every step worker 1's copies equal worker 0's (within a worker of one replica there
    is nothing to compare: "n/a"); each worker's trace holds every step, nothing skipped or
    warned."""
    run = runs["clean"]
    table = run.traces.sync_table().splitlines()[1:]
    assert len(table) == STEPS_RUN
    # one replica per worker: nothing to compare within a worker; across workers, every copy
    assert all(line.split()[1:] == ["n/a", "0"] for line in table), run.traces.sync_table()
    for w in (0, 1):
        trace = run.trace(w)
        assert trace.max_sync_diff() == 0.0
        assert trace.steps_run == STEPS_RUN and trace.steps == list(range(STEPS_RUN))
        assert trace.skipped() == [] and trace.warnings == []


# ---- failure, checkpoints and resuming -----------------------------------------------------
def test_killing_one_worker_fails_the_whole_step(runs):
    """Worker 1 SIGKILLed in step 6: worker 0's next collective fails too, after its 6 steps;
    only the chief's ckpt-4 is kept (the scratch copy deleted), no ckpt-8."""
    run = runs["killed"]
    survivor, victim = run.workers
    assert not run.ok
    assert victim.killed and victim.exit_code == -9
    assert survivor.exit_code == 1 and survivor.error, run.summary()
    assert sorted(_losses(run, 0))[:6] == list(range(6)) and len(_losses(run, 0)) in (6, 7)
    assert "ckpt-4.index" in runs["checkpoints"] and "ckpt-8.index" not in runs["checkpoints"]
    assert "SIGKILL" in run.summary()


def test_resuming_from_the_checkpoint_reaches_the_uninterrupted_weights(runs):
    """The resumed run restores ckpt-4 on both workers, runs steps 4..7 and ends where the clean
    run ended."""
    clean, resumed, tmp = runs["clean"], runs["resumed"], runs["tmp"]
    assert resumed.ok, resumed.summary()
    for w in (0, 1):
        assert f"worker{w}: resumed from ckpt-4 at step 4" in resumed.workers[w].stdout
        assert sorted(_losses(resumed, w)) == list(range(EVERY, STEPS_RUN))
        for step, loss in _losses(resumed, w).items():
            np.testing.assert_allclose(loss, _losses(clean, w)[step], rtol=1e-6)
        for a, b in zip(_weights(tmp / "out_resumed", w), _weights(tmp / "out_clean", w)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert "ckpt-8.index" in runs["final_checkpoints"]


def test_nothing_is_left_behind(runs):
    """After the with block: no worker process, no temporary directory, no worker port listening."""
    assert not os.path.exists(runs["directory"])
    assert runs["new_temp_dirs"] == set()  # the killed worker's scratch went with the cluster
    for run in (runs["clean"], runs["killed"], runs["resumed"]):
        assert all(w.exit_code is not None for w in run.workers)
    host = _listening_ports(["/proc/net/tcp", "/proc/net/tcp6"])
    assert not {BASE_PORT, BASE_PORT + 1} & host


# ---- who can reach the workers --------------------------------------------------------------
def test_worker_ports_answer_only_inside_their_namespace():
    """While a program runs, TF listens on every interface inside the workers' namespace, yet neither
    this host's own addresses nor its loopback answer on those ports.

    The program is stopped with the cluster once the checks are done, not left to finish: in
    MultiWorkerMirroredStrategy a worker that ends first can close its sockets while the other
    still pulls the last all-reduce's data from it ("Collective ops is aborted by: Socket
    closed"), a race of TF's own that a busy machine shows and that is not this test's subject."""
    if not netns_available():
        pytest.fail("this test needs `unshare -rn` (unprivileged network namespaces)")
    with MultiWorkerCluster(workers=2, replicas_per_worker=1) as cluster:
        running = cluster.submit_program(STEPS, "--steps", "3000", record=False)
        inside = [f"/proc/{running.pids[0]}/net/tcp", f"/proc/{running.pids[0]}/net/tcp6"]
        ports = {BASE_PORT, BASE_PORT + 1}
        deadline = time.monotonic() + 60
        while not ports <= _listening_ports(inside) and time.monotonic() < deadline:
            time.sleep(0.05)
        listening_inside = ports <= _listening_ports(inside)
        host = _listening_ports(["/proc/net/tcp", "/proc/net/tcp6"])
        addresses = _host_addresses() + ["127.0.0.1"]
        answered = [(h, p) for h in addresses for p in ports if _answers(h, p)]
        still_inside = ports <= _listening_ports(inside)  # the program was running during the checks
        pids = running.pids
    assert listening_inside and still_inside
    assert not ports & host
    assert answered == []
    for pid in pids:  # stopping the cluster ended the program
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]


# ---- sharding choices --------------------------------------------------------------------------
def test_off_sharding_hands_both_workers_the_same_examples(runs):
    """AutoShardPolicy.OFF (08_worker.py --shard-policy OFF): nothing is sharded, so both workers
    receive the same examples, 0..15 (the 32-example batch rebatched for 2 replicas; TF's own
    pipeline, the recording only looks)."""
    tmp = runs["tmp"]
    with MultiWorkerCluster(workers=2) as cluster:
        off = cluster.run_program(WORKER, "--data", str(tmp / "train.npz"), "--steps", "1",
                                  "--global-batch", "32", "--shard-policy", "OFF")
    assert off.ok, off.summary()
    ids = [off.trace(w).example_ids(0)[0].tolist() for w in (0, 1)]
    assert ids[0] == ids[1] == list(range(16))


#: Keras 3 fit, as the tutorials write it, on every worker (TF_CONFIG from the launcher).
FIT = """
import keras, numpy as np, tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(1) > 0).astype("int64")
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=1, verbose=0)
"""


def _message(worker) -> str:
    """The exception's own text, as the worker printed it last (its type, then its message)."""
    kind = worker.error.split(":", 1)[0]
    tail = worker.stderr_tail
    return tail[tail.rindex(f"\n{kind}: ") + 1:].strip()


def test_keras_fit_fails_under_mt_strategy_with_tensorflows_own_error(tmp_path):
    """keras-team/keras#20585: Keras 3.15's fit fails under TF 2.21's MultiWorkerMirroredStrategy
    on two workers. Under mt.MultiWorkerMirroredStrategy (record=True: the recording drop-in in
    its place) it fails the same way: same exception type, same message, on every worker."""
    program = tmp_path / "fit.py"
    program.write_text(FIT)
    with MultiWorkerCluster(workers=2) as cluster:
        recorded = cluster.run_program(program, record=True)
        stock = cluster.run_program(program, record=False)
    assert [w.exit_code for w in stock.workers] == [1, 1], stock.summary()
    assert [w.exit_code for w in recorded.workers] == [1, 1], recorded.summary()
    for mine, tfs in zip(recorded.workers, stock.workers):
        assert mine.error == tfs.error and tfs.error.startswith("ValueError: ")
        assert _message(mine) == _message(tfs)
        assert "PerReplica" in _message(tfs)


# ---- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, words", [
    ({"workers": 0}, ClusterConfigError, "workers must be a whole number from 1"),
    ({"workers": 5}, ClusterConfigError, "from 1 to 4"),
    ({"workers": 2.0}, ClusterConfigError, "got 2.0"),
    ({"replicas_per_worker": 0}, ClusterConfigError, "replicas_per_worker"),
    ({"replicas_per_worker": True}, ClusterConfigError, "got True"),
])
def test_impossible_clusters_are_refused(kwargs, error, words):
    """Zero or too many workers, or replicas < 1, fail at once with a message that says so."""
    with pytest.raises(error, match=words):
        MultiWorkerCluster(**kwargs)


def test_bad_calls_are_refused_before_any_process_starts():
    """A cluster not started, and kills of missing workers, are refused before any worker starts,
    by submit_program as by run_program."""
    cluster = MultiWorkerCluster(workers=2)
    with pytest.raises(ClusterStateError, match="not started"):
        cluster.submit_program(STEPS)
    with cluster:
        with pytest.raises(WorkerIndexError, match="workers 0 to 1"):
            cluster.submit_program(STEPS, kill_worker=2, at_step=1)
        assert cluster._runs == 0 and not cluster._running  # nothing was launched


def test_bad_tf_configs_and_replica_counts_are_refused():
    """tf_config rejects empty lists, bad addresses and indices; the strategy rejects replicas < 1."""
    with pytest.raises(ClusterConfigError, match="at least one"):
        tf_config([], 0)
    with pytest.raises(ClusterConfigError, match="not a 'host:port'"):
        tf_config(["nohost"], 0)
    with pytest.raises(ClusterConfigError, match="share an address"):
        tf_config(["a:1", "a:1"], 0)
    with pytest.raises(WorkerIndexError, match="0 to 1"):
        tf_config(["a:1", "b:1"], 2)
    with pytest.raises(ReplicaCountError, match="at least 1"):
        MultiWorkerMirroredStrategy(replicas_per_worker=0)
