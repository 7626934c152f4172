"""Starts the worker processes of one multi-worker job, watches them, and leaves nothing behind.

Run by path (``python .../_mwlaunch.py CONFIG``), not as ``-m mirrortutor._mwlaunch``, so it does
not import the package and TensorFlow: it stays small and quick. Usually it runs under
``unshare -rn``: a private network namespace whose only interface is its own loopback (brought up
here), so the workers' gRPC ports, which TensorFlow opens on every interface, exist only inside it.
The workers talk to each other over that loopback; nothing outside can reach them, and the
notebook does not need to: results come back as files.

Protocol on stdout: ``started [pid, ...]`` once every worker process exists, then
``done [exit code, ...]`` (``-9``: killed by SIGKILL). When one worker ends badly, the others get
``grace`` seconds to notice (a synchronous all-reduce fails for everyone) before they are killed.
When stdin closes (the notebook's kernel died) every worker is killed at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

# The sandbox helpers are plain stdlib code; import that file directly (not via the package).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _sandbox import die_with_parent, loopback_up  # noqa: E402


def launch(config: dict) -> list[int]:
    if config["netns"]:
        loopback_up()
    run_dir = config["run_dir"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    procs = []
    for i, tf_config in enumerate(config["tf_configs"]):
        log = open(os.path.join(run_dir, f"worker_{i}.log"), "w")
        procs.append(subprocess.Popen(
            [config["python"], "-m", "mirrortutor.mwtraining", run_dir, str(i)],
            env=dict(env, TF_CONFIG=json.dumps(tf_config)), stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent))
        log.close()
    print("started", json.dumps([p.pid for p in procs]), flush=True)

    def kill_all() -> None:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()

    def watch_stdin() -> None:  # the notebook went away: stop everything now
        sys.stdin.read()
        kill_all()
        os._exit(1)

    threading.Thread(target=watch_stdin, daemon=True).start()
    deadline = time.monotonic() + config["timeout"]
    failed_at = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + config["grace"]):
            kill_all()
            break
        time.sleep(0.05)
    return [p.returncode for p in procs]


if __name__ == "__main__":
    codes = launch(json.loads(sys.argv[1]))
    print("done", json.dumps(codes), flush=True)
