"""MultiWorkerCluster and mt.MultiWorkerMirroredStrategy: real worker processes, one synchronous job.

The workers are child processes with their own TF_CONFIG; this pytest process only launches them
and reads their reports, so its own eager context never joins a cluster (a test checks that). The
jobs are shared by the tests below (each start costs a few seconds on 2 cores).
"""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import replace

import numpy as np
import pytest

import mirrortutor as mt
from mirrortutor.clusters.processes import netns_available
from mirrortutor.record.multiworker import MultiWorkerMirroredStrategy
from mirrortutor.record.tf_internals.cluster import connected_to_cluster as in_cluster
from mirrortutor.clusters.multiworker import BASE_PORT, MultiWorkerCluster, tf_config
from mirrortutor.training.job import TrainingJob, train
from mirrortutor.errors import (BatchSplitError, ClusterConfigError, ClusterStateError,
                                JobConfigError, ReplicaCountError, WorkerIndexError)

JOB = TrainingJob(steps=8, checkpoint_every=4)


@pytest.fixture(scope="module")
def runs():
    """One 2-worker × 2-replica cluster: a clean run, a run with worker 1 killed, a resumed run."""
    scratch_before = set(glob.glob(os.path.join(tempfile.gettempdir(), "mirrortutor-*")))
    with MultiWorkerCluster(workers=2, replicas_per_worker=2) as cluster:
        clean = cluster.run(JOB)
        killed = cluster.run(JOB, kill_worker=1, at_step=6)
        checkpoints = sorted(os.listdir(cluster.checkpoint_dir))
        resumed = cluster.run(JOB, resume=True)
        directory = cluster.directory
        configs = cluster.tf_configs()
    print(f"\nclean run {clean.seconds:.1f} s, killed {killed.seconds:.1f} s, "
          f"resumed {resumed.seconds:.1f} s")
    return {"clean": clean, "killed": killed, "resumed": resumed, "directory": directory,
            "checkpoints": checkpoints, "configs": configs,
            "new_temp_dirs": _new_scratch(scratch_before, directory)}


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


# ---- one synchronous job over two processes ----------------------------------------------------
def test_a_job_shows_its_workers_progress_to_the_end(runs):
    """Each job showed a bar over its steps, following worker 0, and the clean run's reached the
    last step (the killed run's stopped where worker 0 did)."""
    from mirrortutor.progress import FINISHED

    bars = [f for f in FINISHED if f.description == "training on 2 workers"]
    assert len(bars) >= 3 and bars[-3].done == bars[-3].total == JOB.steps  # clean, killed, resumed
    assert bars[-2].done == 6 and bars[-1].done == bars[-1].total



def test_two_workers_finish_with_identical_weights(runs):
    """Both worker processes finish every step with bit-identical weights; worker 0 is the chief."""
    run = runs["clean"]
    assert run.finished and run.weights_identical()
    assert [r.is_chief for r in run.results] == [True, False]
    assert [len(r.devices) for r in run.results] == [2, 2]
    assert {r.num_replicas_in_sync for r in run.results} == {4}
    assert run.results[0].losses == run.results[1].losses and len(run.losses) == JOB.steps


def test_equals_single_machine_mirrored_run(devices, runs):
    """Same global batch and seed on one machine with 4 replicas: same losses and weights (float tol)."""
    reference = train(mt.MirroredStrategy(devices[:4]), JOB)
    run = runs["clean"]
    np.testing.assert_allclose(run.losses, reference.losses, rtol=1e-5)
    for a, b in zip(run.weights, reference.weights):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(run.weights, reference.weights))
    print(f"\nlargest weight difference, 2 workers vs 1 machine: {diff:.3g}")


def test_launching_process_never_joins_the_cluster(runs):
    """The process that launched the workers has no server: its eager context is untouched."""
    assert runs["clean"].finished
    assert not in_cluster()


def test_each_worker_ran_with_the_documented_tf_config(runs):
    """Every worker saw exactly tf_config(addresses, index) in its environment."""
    run = runs["clean"]
    addresses = [f"localhost:{BASE_PORT + i}" for i in range(2)]
    for i, r in enumerate(run.results):
        assert r.tf_config == tf_config(addresses, i) == runs["configs"][i]
    assert tf_config(["a:1", "b:2"], 1) == {"cluster": {"worker": ["a:1", "b:2"]},
                                            "task": {"type": "worker", "index": 1}}


# ---- the merged trace ------------------------------------------------------------------------
def test_every_example_goes_to_exactly_one_replica_of_one_worker(runs):
    """Over both workers' traces, step s's 64 examples are 64s..64s+63, each seen once (DATA policy)."""
    run = runs["clean"]
    for step in range(JOB.steps):
        seen = np.concatenate([ids for r in run.results
                               for ids in r.trace.example_ids(step).values()])
        assert sorted(seen.tolist()) == list(range(64 * step, 64 * step + 64))
    assert "replica_id_in_sync_group" in run.shard_table(0)


def test_cross_worker_allreduce_sums_every_replica_of_every_worker(runs):
    """Each worker records its 2 local gradients; the all-reduced value is their sum over both workers."""
    run = runs["clean"]
    for step in (0, JOB.steps - 1):
        assert run.allreduce_error(step) < 1e-6
        for r in run.results:
            grads = r.trace.gradients(step)
            assert len(grads) == 4 * 2  # 4 trainable variables × 2 local replicas
        outs = [r.trace.reduced_gradients(step) for r in run.results]
        for name in outs[0]:
            np.testing.assert_array_equal(outs[0][name], outs[1][name])
    impls = {a.implementation for r in run.results for a in r.trace.allreduces(0)}
    assert impls == {"CollectiveAllReduce (RING)"}


def test_sync_check_shows_no_drift_within_or_across_workers(runs):
    """After every step the replicas' copies agree within each worker and across workers."""
    run = runs["clean"]
    table = run.sync_table().splitlines()[1:]
    assert len(table) == JOB.steps
    assert all(line.split()[1:] == ["0", "0"] for line in table)
    assert all(r.trace.max_sync_diff() == 0.0 for r in run.results)


# ---- failure, checkpoints and resuming -----------------------------------------------------
def test_each_worker_trace_is_complete_and_the_merged_run_saves_and_loads(runs, tmp_path):
    """Each worker's trace (read from the file the worker wrote) holds every step with nothing
    skipped or warned; the merged run saved with run.save reads back with MultiWorkerRun.load
    and gives the same tables, traces and summaries."""
    run = runs["clean"]
    for r in run.results:
        assert r.trace.steps_run == JOB.steps and r.trace.steps == list(range(JOB.steps))
        assert r.trace.skipped() == [] and r.trace.warnings == []
    run.save(tmp_path / "run.npz")
    loaded = mt.MultiWorkerRun.load(tmp_path / "run.npz")
    assert loaded.summary() == run.summary() and loaded.sync_table() == run.sync_table()
    assert loaded.shard_table(3) == run.shard_table(3)
    assert loaded.allreduce_table(0) == run.allreduce_table(0)
    assert loaded.weights_identical() and loaded.losses == run.losses
    for a, b in zip(run.results, loaded.results):
        assert b.trace.summary() == a.trace.summary() and b.tf_config == a.tf_config
    assert "Largest difference" in loaded.trace(1).summary()


def test_killing_one_worker_fails_the_whole_step(runs):
    """Worker 1 SIGKILLed before step 6: worker 0's all-reduce fails too, after exactly 6 steps."""
    run = runs["killed"]
    survivor, victim = run.results
    assert not run.finished
    assert victim.status == "killed" and victim.exit_code == -9
    assert survivor.status == "failed" and survivor.steps_done == 6
    assert survivor.error.startswith("UnavailableError")
    assert survivor.checkpoints == ["ckpt-4"] and runs["checkpoints"].count("ckpt-4.index") == 1
    assert "ckpt-8.index" not in runs["checkpoints"]
    assert "SIGKILL" in run.summary()


def test_resuming_from_the_checkpoint_reaches_the_uninterrupted_weights(runs):
    """The resumed run restores ckpt-4, runs steps 4..7 and ends where the clean run ended."""
    clean, resumed = runs["clean"], runs["resumed"]
    assert resumed.finished and resumed.weights_identical()
    assert [(r.first_step, r.steps_done, r.restored_from) for r in resumed.results] == \
        [(4, 4, "ckpt-4")] * 2
    np.testing.assert_allclose(resumed.losses, clean.losses[4:], rtol=1e-6)
    for a, b in zip(resumed.weights, clean.weights):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert resumed.results[0].checkpoints == ["ckpt-8"] and resumed.results[1].checkpoints == []


def test_nothing_is_left_behind(runs):
    """After the with block: no worker process, no temporary directory, no worker port listening."""
    assert not os.path.exists(runs["directory"])
    assert runs["new_temp_dirs"] == set()  # the killed worker's scratch went with the cluster
    for run in (runs["clean"], runs["killed"], runs["resumed"]):
        assert all(r.exit_code is not None for r in run.results)
    host = _listening_ports(["/proc/net/tcp", "/proc/net/tcp6"])
    assert not {BASE_PORT, BASE_PORT + 1} & host


# ---- who can reach the workers --------------------------------------------------------------
def test_worker_ports_answer_only_inside_their_namespace():
    """While a job runs, TF listens on every interface inside the workers' namespace, yet neither
    this host's own addresses nor its loopback answer on those ports."""
    if not netns_available():
        pytest.fail("this test needs `unshare -rn` (unprivileged network namespaces)")
    job = TrainingJob(steps=3000)
    with MultiWorkerCluster(workers=2, replicas_per_worker=1) as cluster:
        running = cluster.submit(job)
        inside = [f"/proc/{running.pids[0]}/net/tcp", f"/proc/{running.pids[0]}/net/tcp6"]
        ports = {BASE_PORT, BASE_PORT + 1}
        deadline = time.monotonic() + 60
        while not ports <= _listening_ports(inside) and time.monotonic() < deadline:
            time.sleep(0.05)
        listening_inside = ports <= _listening_ports(inside)
        host = _listening_ports(["/proc/net/tcp", "/proc/net/tcp6"])
        addresses = _host_addresses() + ["127.0.0.1"]
        answered = [(h, p) for h in addresses for p in ports if _answers(h, p)]
        still_inside = ports <= _listening_ports(inside)  # the job was running during the checks
        run = running.wait()
        pids = running.pids
    assert listening_inside and still_inside
    assert not ports & host
    assert answered == []
    assert run.finished
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]


# ---- communication and sharding choices ----------------------------------------------------
def test_nccl_on_cpu_warns_and_off_sharding_duplicates_the_data():
    """NCCL on CPU workers warns and gives RING's numbers; AutoShardPolicy.OFF hands both workers
    the same examples, FILE hands each worker its own files."""
    with MultiWorkerCluster(workers=2, replicas_per_worker=1) as cluster:
        ring = cluster.run(TrainingJob(steps=2, global_batch_size=32))
        nccl = cluster.run(TrainingJob(steps=2, global_batch_size=32, communication="NCCL"))
        off = cluster.run(TrainingJob(steps=1, global_batch_size=32, shard_policy="OFF"))
        by_file = cluster.run(TrainingJob(steps=1, global_batch_size=32, shard_policy="FILE",
                                          files=4))
    assert any("NCCL" in w and "CPU" in w for w in nccl.warnings())
    assert nccl.losses == ring.losses and nccl.finished
    ids = [r.trace.example_ids(0)[0].tolist() for r in off.results]
    assert ids[0] == ids[1] == list(range(16))
    files = [set(np.asarray(r.trace.example_ids(0)[0]) % 4) for r in by_file.results]
    assert files == [{0}, {1}]


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


def test_bad_jobs_and_kills_are_refused_before_any_process_starts():
    """Bad job settings, kills of missing workers or steps, and unsplittable batches are refused."""
    for kwargs, words in [({"steps": 0}, "steps"), ({"shard_policy": "BY_ROW"}, "DATA"),
                          ({"communication": "MPI"}, "RING"), ({"global_batch_size": 1024},
                                                               "larger than"),
                          ({"loop": "epochs"}, "custom"),
                          ({"loop": "fit", "checkpoint_every": 2}, "one epoch"),
                          ({"loop": "fit", "steps": 12}, "whole number of epochs"),
                          ({"loop": "fit", "straggler": 1}, "loop='custom'"),
                          ({"straggler": -1}, "replica_id_in_sync_group"),
                          ({"straggler": 0, "straggler_delay": -0.1}, "from 0 to 60"),
                          ({"shuffle_seed": 1.5}, "shuffle_seed"),
                          ({"recording": "all"}, "first_step"),
                          ({"backup": "chief"}, "per_worker")]:
        with pytest.raises(JobConfigError, match=words):
            TrainingJob(**kwargs)
    cluster = MultiWorkerCluster(workers=2, replicas_per_worker=3)
    with pytest.raises(ClusterStateError, match="not started"):
        cluster.run()
    with cluster:
        with pytest.raises(BatchSplitError, match="multiple of 6"):
            cluster.run(TrainingJob(global_batch_size=64))
        job = TrainingJob(global_batch_size=60)
        with pytest.raises(WorkerIndexError, match="workers 0 to 1"):
            cluster.run(job, kill_worker=2, at_step=1)
        with pytest.raises(JobConfigError, match="at_step"):
            cluster.run(job, kill_worker=1, at_step=job.steps)
        assert cluster._runs == 0  # nothing was launched


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
    assert replace(JOB, steps=3).steps == 3
