"""Clusters live exactly as long as they should: started from any thread they last until stopped or
until the kernel dies, a Kernel → Interrupt does not kill them, and a multi-worker run's folder
goes with the kernel even when the kernel is SIGKILLed (kept only when asked)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from mirrortutor.clusters.multiworker import MultiWorkerCluster

from test_cluster import PRELUDE, _report

#: A plain TF multi-worker program that runs as many steps as asked (no data file).
STEPS = str(Path(__file__).resolve().parent / "programs" / "steps.py")


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_multiworker_program_submitted_from_a_thread_that_ends_runs_to_the_end():
    """A program submitted (``submit_program``) from a helper thread that then ends keeps running
    (the workers are not tied to that thread) and finishes every step on every worker."""
    box = {}
    with MultiWorkerCluster(workers=2, replicas_per_worker=1) as cluster:
        starter = threading.Thread(target=lambda: box.update(job=cluster.submit_program(
            STEPS, "--steps", "6", record=False)))
        starter.start()
        starter.join()
        time.sleep(2.0)  # the starting thread is gone; the workers must not be
        assert all(_alive(pid) for pid in box["job"].pids) or box["job"].wait().ok
        run = box["job"].wait()
    assert run.ok and [w.exit_code for w in run.workers] == [0, 0], run.summary()
    assert [w.stdout.count("\n") for w in run.workers] == [6, 6]


#: Every worker all-reduces once; the chief then works on alone for a while.
UNEVEN_END = """
import time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print(float(total), flush=True)
if strategy.cluster_resolver.task_id == 0:
    time.sleep(4)
"""


def test_a_worker_that_ends_first_keeps_its_server_until_its_peer_has_ended(tmp_path):
    """Worker 1 ends while the chief still runs: its process (and TF's server in it, which a peer
    may still pull the last all-reduce's data from) stays up until the chief has ended
    (mirrortutor/clusters/program_worker.py), and both end well."""
    script = tmp_path / "uneven_end.py"
    script.write_text(UNEVEN_END)
    with MultiWorkerCluster(workers=2, replicas_per_worker=1) as cluster:
        job = cluster.submit_program(script, record=False)
        ended = Path(job.run_dir, "worker_1.json")
        deadline = time.monotonic() + 120
        while not ended.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)  # the chief sleeps 4 s after the all-reduce: it is still running
        up_after_its_end = ended.exists() and _alive(job.pids[1])
        chief_running = not Path(job.run_dir, "worker_0.json").exists()
        run = job.wait()
    assert run.ok and [w.stdout for w in run.workers] == ["2.0\n", "2.0\n"], run.summary()
    assert chief_running and up_after_its_end


KILLED_KERNEL = r'''
import json, os, signal, time
import mirrortutor as mt
cluster = mt.MultiWorkerCluster(workers=2, debug=DEBUG).start()
job = cluster.submit_program(STEPS, "--steps", "20000", record=False)
time.sleep(8)  # the workers are training and writing into the folder
print(json.dumps({"directory": cluster.directory, "pids": job.pids}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
'''


def _killed_kernel(debug: bool) -> dict:
    code = textwrap.dedent(KILLED_KERNEL.replace("DEBUG", str(debug)).replace("STEPS", repr(STEPS)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_run_folder_is_removed_when_the_kernel_is_sigkilled():
    """SIGKILL the kernel mid-run: within seconds no worker is left and its /tmp/mirrortutor-mw-*
    folder (logs, what the workers wrote) is gone."""
    seen = _killed_kernel(debug=False)
    deadline = time.monotonic() + 30
    while (os.path.exists(seen["directory"]) or any(map(_alive, seen["pids"]))) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, seen["pids"]))
    assert not os.path.exists(seen["directory"])


def test_run_folder_is_kept_when_asked():
    """With debug=True the folder is kept on purpose, even after a SIGKILLed kernel."""
    import shutil

    seen = _killed_kernel(debug=True)
    try:
        time.sleep(3)
        assert os.path.exists(seen["directory"])
        assert os.path.exists(os.path.join(seen["directory"], "run_1", "worker_0.log"))
    finally:
        shutil.rmtree(seen["directory"], ignore_errors=True)


INTERRUPT = PRELUDE + r'''
import signal
signal.signal(signal.SIGINT, lambda *_: report.setdefault("kernel_interrupted", True))
with LocalCluster(workers=2, ps=1) as cluster:
    os.killpg(os.getpgid(0), signal.SIGINT)  # what Jupyter's Kernel -> Interrupt sends
    time.sleep(1.0)
    report["ran_after_interrupt"] = len(Training(cluster).fit(20))
print("REPORT" + json.dumps(report))
'''


def test_kernel_interrupt_does_not_kill_the_cluster():
    """Jupyter interrupts a kernel by signalling its whole process group; the cluster's processes
    live in a session of their own, so training goes on afterwards, every step run."""
    code = "import os\nos.setpgid(0, 0)\n" + INTERRUPT  # a group of its own, like a kernel
    r = _report(code)
    assert r["kernel_interrupted"] is True
    assert r["ran_after_interrupt"] == 20
