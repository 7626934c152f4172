"""The child process behind a process-mode :class:`~mirrortutor.clusters.ps.LocalCluster`.

Run as ``python -m mirrortutor.clusters.agent agent CONFIG`` by the notebook's kernel. It starts one
``tf.distribute.Server`` process per ps and worker task (``serve`` below), each forked from a
forkserver that imported TensorFlow once (:mod:`~mirrortutor.clusters.forkserver`: a task is up
in a fraction of a second instead of importing TensorFlow itself), says which pid each got
(``ready {"worker": [pid, ...], "ps": [...]}``), and kills or restarts them when told to on stdin
(``kill worker 1`` -> ``killed``, ``start worker 1`` -> ``started PID``, ``quit``). While the
tasks come up it says ``up ps 0``, ``up worker 0``, … as each one answers.

The tasks share the kernel's network namespace: TensorFlow's servers listen on every interface of
it, so they are private exactly when the kernel is (the course's kernel lives in a namespace whose
only interface is its own loopback; see :mod:`mirrortutor.clusters.kernel`). When stdin closes
(the notebook's kernel died) the agent kills its servers and exits.

The agent itself imports only the standard library; the forkserver it starts imports TensorFlow,
once, for all its tasks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from .forkserver import ForkedProcess
from .processes import Children


#: What the forkserver imports once for every task it forks.
PRELOAD = ("tensorflow", "mirrortutor.clusters.agent")


def serve(spec_json: str, job: str, index: int, threads: int) -> None:
    """Run one TensorFlow server task until killed (or until its agent dies)."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads) if threads else None
    server = tf.distribute.Server(tf.train.ClusterSpec(json.loads(spec_json)), job_name=job,
                                  task_index=index, protocol="grpc", config=config, start=True)
    server.join()


def _connect(port: int, timeout: float) -> socket.socket | None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


class Agent:
    """Starts, kills and restarts one cluster's server tasks, as the kernel tells it on stdin."""

    def __init__(self, config: dict):
        self.config = config
        self.children = Children()

    def start(self, job: str, index: int) -> None:
        c = self.config
        # TF's C++ log lines would land in the notebook: keep them only when debugging.
        log = "/dev/stderr" if c.get("debug") else None  # the agent's stderr, via the forkserver
        self.children.adopt((job, index), ForkedProcess(
            PRELOAD, "mirrortutor.clusters.agent:serve",
            (json.dumps(c["spec"]), job, index, c["threads"]), log, name=f"mt {job} {index}"))

    def kill(self, job: str, index: int) -> None:
        self.children.kill((job, index))

    def wait_listening(self, job: str, index: int, timeout: float = 60) -> bool:
        port = int(self.config["spec"][job][index].rsplit(":", 1)[1])
        sock = _connect(port, timeout)
        if sock is None:
            return False
        sock.close()
        return True

    def pid(self, job: str, index: int) -> int:
        return self.children.procs[(job, index)].pid

    def run(self) -> None:
        c = self.config
        tasks = [(job, i) for job in ("ps", "worker") for i in range(len(c["spec"][job]))]
        for job, i in tasks:
            self.start(job, i)
        ok = True
        for job, i in tasks:  # one line as each task answers: the kernel's progress bar
            ok = ok and self.wait_listening(job, i)
            if ok:
                print(f"up {job} {i}", flush=True)
        pids = {job: [self.pid(job, i) for i in range(len(c["spec"][job]))]
                for job in ("worker", "ps")}
        print(f"ready {json.dumps(pids)}" if ok else "failed", flush=True)
        try:
            for line in sys.stdin:
                words = line.split()
                if words[:1] == ["quit"]:
                    break
                if len(words) == 3 and words[0] in ("kill", "start"):
                    job, index = words[1], int(words[2])
                    if words[0] == "kill":
                        self.kill(job, index)
                        print("killed", flush=True)
                    else:
                        self.start(job, index)
                        ok = self.wait_listening(job, index)
                        print(f"started {self.pid(job, index)}" if ok else "failed", flush=True)
        finally:  # quit, stdin closed (the kernel died) or a signal: leave nothing running
            self.children.close()  # returns once every task and the forkserver have ended


def main(argv: list[str]) -> None:
    if argv[0] == "agent":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        Agent(json.loads(argv[1])).run()
    else:
        raise SystemExit(f"unknown command {argv[0]!r}: expected 'agent'")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main(sys.argv[1:])
