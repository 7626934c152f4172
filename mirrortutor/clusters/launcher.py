"""Starts the worker processes of one multi-worker program run, watches them, and leaves nothing behind.

Run as ``python -m mirrortutor.clusters.launcher CONFIG`` by
:class:`~mirrortutor.clusters.multiworker.MultiWorkerCluster`. It imports only the standard library
and :mod:`~mirrortutor.clusters.processes` (the package's root imports nothing heavy), so it starts
in a few hundredths of a second; its forkserver imports TensorFlow once and forks every worker
from it (:mod:`~mirrortutor.clusters.forkserver`). Usually it runs under ``unshare -rn``: a private network namespace
whose only interface is its own loopback (brought up here), so the workers' gRPC ports, which
TensorFlow opens on every interface, exist only inside it. The workers talk to each other over that
loopback; nothing outside can reach them, and the notebook does not need to: results come back as
files.

Protocol on stdout: ``started [pid, ...]`` once every worker process exists, then
``done [exit code, ...]`` (``-9``: killed by SIGKILL). When one worker ends badly, the others get
``grace`` seconds to notice (a synchronous all-reduce fails for everyone) before they are killed.
When stdin closes (the kernel's ``stop()``, or the kernel died) every worker is killed at once.
The launcher ends only after its workers, its forkserver and multiprocessing's resource tracker
have ended, and the kernel's ``stop()`` waits for it: when that returns, nothing is left running.
Each worker's temporary files (autograph's generated modules, for one) go to the run's folder, which
``stop()`` deletes with everything else.
"""

from __future__ import annotations

import json
import os
import sys
import time

from .forkserver import ForkedProcess
from .processes import Children, loopback_up

#: What the launcher's forkserver imports once, for every worker it forks: TensorFlow, the
#: substitution and the program runner (``cluster.run_program``).
PRELOAD = ("tensorflow", "keras", "mirrortutor.record.multiworker",
                   "mirrortutor.record.substitute", "mirrortutor.record.program",
                   "mirrortutor.clusters.program_worker")


def launch(config: dict) -> list[int]:
    """Start every worker of ``config``, wait for them, and return their exit codes.

    Whatever happens, it returns only once every process it started is gone
    (:meth:`~mirrortutor.clusters.processes.Children.close`): the kernel's ``stop()`` waits for
    this process, so nothing outlives that call.
    """
    if config["netns"]:
        loopback_up()
    run_dir = config["run_dir"]
    os.environ.pop("TF_CONFIG", None)
    children = Children()
    program = json.dumps(config["program"])  # what every worker runs (program_worker)
    try:
        for i, tf_config in enumerate(config["tf_configs"]):  # forked: TensorFlow imported once
            children.adopt(i, ForkedProcess(PRELOAD,
                                            "mirrortutor.clusters.program_worker:forked",
                                            (run_dir, i, json.dumps(tf_config), program),
                                            os.path.join(run_dir, f"worker_{i}.log"),
                                            name=f"mt mw worker {i}", tmpdir=run_dir))
        procs = [children.procs[i] for i in range(len(config["tf_configs"]))]
        print("started", json.dumps([p.pid for p in procs]), flush=True)
        stopped = children.on_stdin_closed()  # the kernel said quit, or went away: stop now
        deadline = time.monotonic() + config["timeout"]
        failed_at = None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                failed_at = now
            if stopped.is_set() or now > deadline or \
                    (failed_at is not None and now > failed_at + config["grace"]):
                children.kill_all()
                break
            stopped.wait(0.05)
        for p in procs:
            p.wait()
        return [p.returncode for p in procs]
    finally:
        children.close()


if __name__ == "__main__":
    codes = launch(json.loads(sys.argv[1]))
    try:
        print("done", json.dumps(codes), flush=True)
    except BrokenPipeError:  # the kernel is gone: nobody to tell
        pass
