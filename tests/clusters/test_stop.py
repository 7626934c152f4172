"""When a launcher's ``stop()`` returns, every process it started is gone, and its temporary files.

Each scenario runs in a fresh Python, as a notebook kernel would, with a temporary folder of its own
(``TMPDIR``) and a mark in its environment that every process it starts inherits (forked ones
included: ``/proc/PID/environ`` keeps the environment the process was exec'd with). Just before
``stop()`` the scenario records, from ``/proc``, every living descendant of itself and every living
process that carries the mark (a process orphaned and reparented elsewhere still does); right after
``stop()`` returns, with no waiting, it lists which of them, and which marked processes at all, are
still alive, and what is left in its temporary folder. A zombie counts as gone: it holds no port,
no file and no memory, only an exit status for its parent.

The scenarios cover every launcher and way out: ``mt.MultiWorkerCluster`` after a finished run,
after one worker was killed mid-run (a plain program by ``run_program``), and after an exception inside the ``with`` block while the
workers train (contained, and not); ``mt.LocalCluster`` in process mode after a plain ``stop()``,
and after a worker was killed and restarted and an exception left the ``with`` block; and
``mt.LocalCluster`` in ``in_process`` mode, which starts no process and must leave none.

The temporary folder is the scenario's own, so another program's ``pymp-*`` folder cannot be
mistaken for this run's; ``stop_seconds`` (printed with ``-s``) is a figure, never a check.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile

import pytest

from mirrortutor.clusters.processes import netns_available

PRELUDE = r'''
import json, os, sys, tempfile, time, uuid
os.environ["TMPDIR"] = sys.argv[1]  # this scenario's own temporary folder, for it and its children
tempfile.tempdir = None
MARK = "MIRRORTUTOR_STOP_TEST"
os.environ[MARK] = uuid.uuid4().hex  # inherited by every process this kernel starts
import warnings
warnings.simplefilter("ignore")
import mirrortutor as mt
report = {}


def _stat(pid):
    """(state, ppid, start time) of ``pid``, or None when it does not exist."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _marked(pid):
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return False
    return f"{MARK}={os.environ[MARK]}".encode() in env


def living():
    """{(pid, start time): what it is} for every living process this kernel started: its
    descendants, and every process that carries this kernel's mark."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p))}
    stats = {p: s for p, s in stats.items() if s[0] not in ("Z", "X")}
    tree, grew = {os.getpid()}, True
    while grew:
        new = {p for p, s in stats.items() if s[1] in tree} - tree
        tree |= new
        grew = bool(new)
    out = {}
    for pid, (_, _, start) in stats.items():
        if pid != os.getpid() and (pid in tree or _marked(pid)):
            try:
                comm = open(f"/proc/{pid}/comm").read().strip()
                args = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")[:120]
            except OSError:
                continue
            out[(pid, start)] = f"{pid} {comm!r}: {args.decode(errors='replace')}"
    return out


def temp_entries():
    return sorted(os.listdir(sys.argv[1]))


def check(name, before, seen, t0):
    """Right after a stop() returned, with no waiting: what of ``seen`` (and what marked process
    at all) is still alive, and what is new in the temporary folder since ``before``."""
    seconds = time.monotonic() - t0  # how long stopping took (reported, never asserted)
    now = living()
    report[name] = {"seen": sorted(seen.values()), "alive": sorted(now.values()),
                    "temp_left": sorted(set(temp_entries()) - set(before)),
                    "stop_seconds": round(seconds, 2)}


def stopped(name, before, cluster):
    """Record what runs, call ``cluster.stop()``, check."""
    seen = living()
    t0 = time.monotonic()
    cluster.stop()
    check(name, before, seen, t0)


def left_by_exception(name, make, body):
    """``body(cluster)`` inside ``with make() as cluster:``, then an exception leaves the block
    (its ``__exit__`` calls stop()); check."""
    before, seen = temp_entries(), {}
    try:
        with make() as cluster:
            body(cluster)
            seen.update(living())
            t0 = time.monotonic()
            raise RuntimeError("a cell failed inside the with block")
    except RuntimeError:
        pass
    check(name, before, seen, t0)


def done():
    print("REPORT" + json.dumps(report))
'''

MULTIWORKER = PRELUDE + r'''
PROGRAM = os.path.join(sys.argv[1], "worker_program.py")  # written before any `before`
with open(PROGRAM, "w") as f:
    f.write("""
import sys
import keras, numpy as np, tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.ones((64, 2), "float32")
it = iter(strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, x)).batch(4).repeat()))
with strategy.scope():
    v = tf.Variable(0.0)
@tf.function
def step(it):
    return strategy.run(lambda b: v.assign_add(tf.reduce_sum(b[0])), args=(next(it),))
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 200):
    step(it)
    print(i, flush=True)
""")


def training(cluster):
    """Submit a long run and wait (set-up only, bounded) until worker 0 has printed a step."""
    path = os.path.join(cluster.submit_program(PROGRAM, "100000").run_dir, "worker_0.stdout")
    deadline = time.monotonic() + 120
    while not (os.path.exists(path) and os.path.getsize(path)) and time.monotonic() < deadline:
        time.sleep(0.1)


def program_then_stop(name, **run):
    before = temp_entries()
    cluster = mt.MultiWorkerCluster(workers=2, grace=3).start()
    assert cluster.run_program(PROGRAM, **run).workers
    stopped(name, before, cluster)


program_then_stop("multiworker run_program, finished")
program_then_stop("multiworker run_program, a worker killed mid-run", kill_worker=1, at_step=5)
left_by_exception("multiworker, exception inside with while training",
                  lambda: mt.MultiWorkerCluster(workers=2), training)
left_by_exception("multiworker uncontained, exception inside with while training",
                  lambda: mt.MultiWorkerCluster(workers=2, contain=False), training)
done()
'''

LOCAL_PROCESS = PRELUDE + r'''
def kill_restart(cluster):
    cluster.kill_worker(0)
    cluster.restart_worker(0)


left_by_exception("local process cluster, worker killed and restarted, exception inside with",
                  lambda: mt.LocalCluster(workers=2, ps=1), kill_restart)
before = temp_entries()
stopped("local process cluster, stop()", before, mt.LocalCluster(workers=2, ps=1).start())
done()
'''

LOCAL_IN_PROCESS = PRELUDE + r'''
before = temp_entries()
stopped("local in_process cluster, stop()", before,
        mt.LocalCluster(workers=1, ps=1, mode="in_process").start())
done()
'''


@pytest.fixture
def temp():
    """A fresh, short temporary folder (a forkserver's socket path in it must stay < 108 bytes)."""
    path = tempfile.mkdtemp(prefix="mt-stop-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _scenarios(code: str, temp: str, contained: bool = False) -> dict:
    """Run ``code`` in a fresh Python whose temporary folder is ``temp``; return its report."""
    prefix = ["unshare", "-rn"] if contained else []
    if contained:  # as the course's kernel runs: its own network, loopback up
        code = "from mirrortutor.clusters.processes import loopback_up\nloopback_up()\n" + code
    out = subprocess.run(prefix + [sys.executable, "-c", code, temp], capture_output=True,
                         text=True, timeout=600)
    lines = [l for l in out.stdout.splitlines() if l.startswith("REPORT")]
    assert lines, out.stderr[-4000:]
    return json.loads(lines[-1][len("REPORT"):])


def _assert_clean(report: dict, least_seen: int) -> None:
    for name, r in report.items():
        print(f"{name}: stop() took {r['stop_seconds']} s")  # a figure, not a check
        assert len(r["seen"]) >= least_seen, (name, r["seen"])  # the record did see the processes
        assert r["alive"] == [], f"{name}: alive after stop(): {r['alive']}"
        assert r["temp_left"] == [], f"{name}: left in the temporary folder: {r['temp_left']}"


def test_multiworker_stop_leaves_no_process_and_no_file(temp):
    """Launcher, forkserver and workers are all gone when stop() returns (after a finished
    program run, a killed worker, an exception mid-run; contained or not), and no run folder or
    pymp-* folder is left. Before stop() the record saw at least the janitor (and, mid-run, the launcher, its
    forkserver and both workers)."""
    report = _scenarios(MULTIWORKER, temp)
    assert len(report) == 4
    _assert_clean(report, least_seen=1)
    for name, r in report.items():
        if "while training" in name:
            assert sum("mt mw worker" in what for what in r["seen"]) == 2, r["seen"]


def test_local_process_cluster_stop_leaves_no_process_and_no_file(temp):
    """A process-mode LocalCluster's agent, forkserver and tasks (a restarted worker included)
    are all gone when stop() returns, after an exception inside the with block too."""
    report = _scenarios(LOCAL_PROCESS, temp, contained=netns_available())
    assert len(report) == 2
    _assert_clean(report, least_seen=0)
    for r in report.values():  # the record saw the tasks: 2 workers and a ps
        assert sum("'mt " in what for what in r["seen"]) == 3, r["seen"]


def test_in_process_cluster_starts_no_process_and_leaves_none(temp):
    """An in_process LocalCluster runs its servers inside the kernel: nothing to start or leave."""
    report = _scenarios(LOCAL_IN_PROCESS, temp)
    _assert_clean(report, least_seen=0)
    assert report["local in_process cluster, stop()"]["seen"] == []
