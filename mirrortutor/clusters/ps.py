"""``mt.LocalCluster``: a real parameter-server cluster on this machine, in one ``with`` block.

>>> with mt.LocalCluster(workers=2, ps=1) as cluster:      # doctest: +SKIP
...     with cluster.strategy.scope():
...         v = tf.Variable(0.0)                              # lives on /job:ps/task:0
...     cluster.coordinator.schedule(step_fn); cluster.coordinator.join()

Each ps and worker task is a real ``tf.distribute.Server`` speaking gRPC; the coordinator (the
"chief") is the notebook's own process, whose eager context ``ParameterServerStrategy`` connects
to the cluster. Two modes:

- ``mode="process"`` (default): every task is a child OS process, so a worker can be killed
  (:meth:`LocalCluster.kill_worker`) and restarted (:meth:`LocalCluster.restart_worker`). About
  10 s to start on 2 cores (each child imports TensorFlow).
- ``mode="in_process"``: every task is a server thread pool inside the notebook's process. Quick to
  start, but TensorFlow cannot stop such a server ("Clean shutdown is not currently implemented"):
  the servers are kept and reused by the next in-process cluster of the same shape, and live until
  the kernel restarts. Each needs ``inter_op_parallelism_threads >= 4`` or it hangs on 2 cores.

**Who can reach the ports.** ``tf.distribute.Server`` listens on every interface (TF's C++
hard-codes ``0.0.0.0:<port>``) and runs any TensorFlow op for whoever connects; so does the
coordinator's own server, which TensorFlow opens inside the kernel and never closes. The tasks
therefore share the kernel's network namespace, and the course's kernel (``make lab``, the
"mirrortutor" kernelspec; see :mod:`mirrortutor.clusters.kernel`) lives in a private one whose only
interface is its own loopback: no other host and no other local user can reach any of these
ports. In any other kernel they listen on this machine's interfaces, and
:class:`ExposedPortWarning` says so each time a cluster starts.

**Failures.** A worker killed mid-training is TensorFlow's business (the others carry on, a
restarted one rejoins). Every worker dead for ``recovery_timeout`` seconds, or a ps lost, ends the
waiting steps with :class:`~mirrortutor.errors.ClusterFailureError` (see
:mod:`~mirrortutor.clusters.watch`), and :meth:`LocalCluster.stop` returns within seconds whatever
the tasks' state, once every process the cluster started has ended.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass

import tensorflow as tf

from ..errors import ClusterConfigError, ClusterStateError, ExposedPortWarning, WorkerIndexError
from ..progress import progress
from ..record.tf_internals.cluster import (live_coordinators, point_coordinator_at,
                                            stop_coordinator)
from ..validate import whole_number
from .processes import Supervisor, alive, check_port_free, free_ports, private_network
from .watch import COORDINATOR_LOG, TaskWatch, quiet_after_stop

# TF's own tutorial sets this: a call to an unreachable task fails at once (and the coordinator
# retries elsewhere) instead of waiting for the task to come back.
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

#: Threads each in-process server needs: fewer and the tasks wait on each other forever (2 cores).
IN_PROCESS_THREADS = 4

# The kernel's coordinator port (TF never closes it) and the in-process servers (nor them).
_chief_port: int | None = None
_in_process_servers: dict[tuple[int, int], tuple[dict, list]] = {}
_running: "LocalCluster | None" = None
_kernel_mode: str | None = None  # switching modes in one kernel hangs TF's coordinator (seen)


@dataclass
class ClusterInfo:
    """Where the tasks of a running cluster are."""

    mode: str  # "process" or "in_process"
    spec: dict[str, list[str]]  # {"worker": ["localhost:port", ...], "ps": [...], "chief": [...]}: TF's cluster spec
    contained: bool  # True when the kernel's network is private: no port is reachable from outside
    exposed_ports: list[int]  # ports listening on this host's interfaces (coordinator, tasks)
    start_seconds: float  # from LocalCluster.__enter__ to a connected coordinator


class LocalCluster:
    """A parameter-server cluster of ``workers`` workers and ``ps`` parameter servers, here.

    ``ports``: optional list of ``workers + ps`` port numbers (workers first); by default the OS
    picks free ones. ``variable_partitioner`` goes to ``ParameterServerStrategy`` (to shard large
    variables across several ps). ``contain=True`` insists on a kernel in a private network (an
    error otherwise); ``None`` warns when the kernel is not. ``recovery_timeout``: seconds the
    steps wait with every worker dead before they fail. ``debug`` shows TF's log lines.
    """

    def __init__(self, workers: int = 2, ps: int = 1, mode: str = "process", *, ports=None,
                 variable_partitioner=None, contain: bool | None = None,
                 recovery_timeout: float = 15.0, debug: bool = False):
        for name, n in (("workers", workers), ("ps", ps)):
            whole_number(n, ClusterConfigError,
                         f"{name} must be a whole number of at least 1, but got {n!r}. A parameter-"
                         f"server cluster needs at least one worker and one ps: "
                         f"mt.LocalCluster(workers=2, ps=1), for example.")
        if workers + ps > 16:
            raise ClusterConfigError(
                f"{workers} workers and {ps} ps asked for: at most 16 tasks in all, since every "
                f"task shares this machine's cores. Ask for fewer.")
        if mode not in ("process", "in_process"):
            raise ClusterConfigError(
                f"mode must be 'process' (tasks in child processes, a worker can be killed) or "
                f"'in_process' (tasks inside this kernel, quicker to start), but got {mode!r}.")
        if ports is not None and (len(ports) != workers + ps or len(set(ports)) != len(ports)):
            raise ClusterConfigError(
                f"ports must list {workers + ps} different port numbers (workers first, then ps), "
                f"but got {ports!r}. Or leave ports=None to let LocalCluster pick free ones.")
        self.num_workers, self.num_ps, self.mode = workers, ps, mode
        self._ports = list(ports) if ports is not None else None
        self._partitioner = variable_partitioner
        self._contain, self._debug = contain, debug
        self.recovery_timeout = float(recovery_timeout)
        self._agent: Supervisor | None = None
        self._watch: TaskWatch | None = None
        #: The task processes' pids (process mode), None for a killed worker.
        self.pids: dict[str, list[int | None]] = {"worker": [], "ps": []}
        #: what TensorFlow's coordinator said about failed workers (kept, not printed)
        self.coordinator_log: list[str] = COORDINATOR_LOG.messages
        self.strategy = None  # the tf.distribute.ParameterServerStrategy, once started
        self.coordinator = None  # the tf.distribute.coordinator.ClusterCoordinator, once started
        self.info: ClusterInfo | None = None

    # ---- starting ------------------------------------------------------------------------------
    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "LocalCluster":
        """Start the tasks and connect this kernel to them as the coordinator."""
        global _running, _chief_port
        if self.strategy is not None:
            raise ClusterStateError(
                "This LocalCluster is already running; a cluster starts once. Use it as it is, "
                "or stop() it first and start a new mt.LocalCluster(...).")
        if _running is not None:
            raise ClusterStateError(
                "Another LocalCluster is still running in this kernel, and the kernel can "
                "coordinate only one cluster at a time. Leave its `with` block (or call its "
                "stop()) first, then start this one.")
        global _kernel_mode
        if _kernel_mode not in (None, self.mode):
            raise ClusterStateError(
                f"This kernel already ran a mode={_kernel_mode!r} cluster; a mode={self.mode!r} "
                f"cluster after it hangs TensorFlow's coordinator (seen on TF 2.21). Restart the "
                f"kernel to switch modes, or use mode={_kernel_mode!r}.")
        t0 = time.monotonic()
        contained = private_network()
        if self._contain and not contained:
            raise ClusterConfigError(
                "contain=True asked for a cluster no other host or user can reach, but this "
                "kernel's network is not private. Open the course with `make lab` (its kernel, "
                "'Python 3 (mirrortutor, private network)', lives in a network of its own), or "
                "pass contain=None to run here with a warning.")
        if self._ports is not None:
            for port in self._ports:
                check_port_free(port)
        with progress(self.num_workers + self.num_ps + 1, "starting the cluster",
                      unit="task") as bar:
            spec = self._start_processes(bar) if self.mode == "process" else \
                self._start_in_process()
            if _chief_port is None:
                _chief_port = free_ports(1)[0]
            spec = dict(spec, chief=[f"localhost:{_chief_port}"])
            _running, _kernel_mode = self, self.mode
            try:
                self._connect(spec)
            except BaseException:
                self.stop()
                raise
            bar.n = bar.total  # every task up, and this kernel connected as their coordinator
        exposed = [] if contained else [int(a.rsplit(":", 1)[1]) for j in ("chief", "worker", "ps")
                                        for a in spec[j]]
        self.info = ClusterInfo(self.mode, spec, contained, exposed, time.monotonic() - t0)
        if self.mode == "process":
            self._watch = TaskWatch(self, self.recovery_timeout)
        if not contained:
            warnings.warn(ExposedPortWarning(
                "Every gRPC port of this cluster (the coordinator's in this kernel, and each "
                "task's) listens on this machine's network interfaces, and runs any TensorFlow "
                "op for whoever connects: this kernel's network is not private. Open the course "
                "with `make lab`, whose kernel lives in a network of its own; on a shared "
                "machine, keep these ports behind a firewall (cluster.info.exposed_ports)."),
                stacklevel=3)
        return self

    def _start_processes(self, bar) -> dict:
        ports = self._ports or free_ports(self.num_workers + self.num_ps)
        spec = {"worker": [f"localhost:{p}" for p in ports[:self.num_workers]],
                "ps": [f"localhost:{p}" for p in ports[self.num_workers:]]}
        config = {"spec": spec, "threads": 0, "debug": self._debug}
        self._agent = Supervisor("mirrortutor.clusters.agent", ["agent", json.dumps(config)],
                                 contained=False, what="the task supervisor")
        for _ in range(self.num_workers + self.num_ps):  # "up worker 0": one task answered
            said = self._agent.read_line()
            if not said.startswith("up "):
                self.stop()
                raise ClusterStateError(
                    f"Could not start the cluster's tasks: the task supervisor answered "
                    f"{said or 'nothing'!r}. Run mt.LocalCluster(..., debug=True) to see "
                    "TensorFlow's own messages.")
            bar.update(1)
        line = self._expect("ready", "start the cluster's tasks")
        self.pids = json.loads(line.split(maxsplit=1)[1])
        return spec

    def _start_in_process(self) -> dict:
        key = (self.num_workers, self.num_ps)
        if key in _in_process_servers and self._ports is None:
            return _in_process_servers[key][0]
        ports = self._ports or free_ports(sum(key))
        spec = {"worker": [f"localhost:{p}" for p in ports[:self.num_workers]],
                "ps": [f"localhost:{p}" for p in ports[self.num_workers:]]}
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=IN_PROCESS_THREADS)
        servers = [tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=i,
                                        protocol="grpc", config=config, start=True)
                   for job in ("worker", "ps") for i in range(len(spec[job]))]
        _in_process_servers[key] = (spec, servers)
        return spec

    def _connect(self, spec: dict) -> None:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(spec), rpc_layer="grpc")
        # TF cannot close the coordinator's server, nor open a second one on its port. So point
        # an existing server at the new cluster first; the strategy then only updates again.
        point_coordinator_at(spec)
        self.strategy = tf.distribute.ParameterServerStrategy(
            resolver, variable_partitioner=self._partitioner)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)

    # ---- workers coming and going (process mode) -------------------------------------------
    def _expect(self, word: str, doing: str) -> str:
        if self._agent is None:
            raise ClusterStateError(f"Could not {doing}: this cluster is not running.")
        try:
            return self._agent.expect(word, doing, "Run mt.LocalCluster(..., debug=True) to see "
                                                   "TensorFlow's own messages.")
        except ClusterStateError:
            self.stop()
            raise

    def _worker_command(self, verb: str, index: int) -> None:
        if self.mode != "process" or self._agent is None:
            state = "in_process" if self.mode != "process" else "not running"
            raise ClusterStateError(
                f"{verb}_worker needs a running cluster in mode='process' (tasks in their own "
                f"processes), but this one is {state}. Start mt.LocalCluster(mode='process').")
        whole_number(index, WorkerIndexError, f"Worker {index!r} does not exist: this cluster has "
                     f"workers 0 to {self.num_workers - 1}.", low=0, high=self.num_workers - 1)
        if verb == "kill":
            self._agent.send(f"kill worker {index}")
            self._expect("killed", f"kill worker {index}")
            self.pids["worker"][index] = None
        else:
            self._agent.send(f"start worker {index}")
            line = self._expect("started", f"restart worker {index}")
            self.pids["worker"][index] = int(line.split()[1])

    def kill_worker(self, index: int) -> None:
        """Kill worker ``index``'s process at once (SIGKILL), as a crash or preemption would."""
        self._worker_command("kill", index)

    def restart_worker(self, index: int) -> None:
        """Start worker ``index`` again on its old port; the coordinator picks it up by itself."""
        self._worker_command("restart", index)

    # ---- stopping ------------------------------------------------------------------------------
    @property
    def lost_ps(self) -> list[int]:
        """The parameter servers this cluster lost (their process died), in process mode."""
        return [i for i, pid in enumerate(self.pids["ps"]) if not alive(pid)]

    def stop(self) -> None:
        """Stop the coordinator's threads and the task processes, within seconds whatever state
        the tasks are in (dead workers included). Safe to call twice."""
        global _running
        if self._watch is not None:
            self._watch.stop()
        if self.coordinator is not None:  # at once: TF's own stop can wait an hour for a worker
            quiet_after_stop()
            # Its own, and those the program made (ClusterCoordinator(strategy)) for this cluster.
            for coordinator in [self.coordinator] + live_coordinators():
                if not getattr(coordinator, "_mirrortutor_stopped", False):
                    stop_coordinator(coordinator)
        self.coordinator = self.strategy = None
        if self._agent is not None:
            self._agent.stop()
            self._agent = None
        self.pids = {"worker": [], "ps": []}
        if _running is self:
            _running = None

    def __repr__(self) -> str:
        state = "running" if self.strategy is not None else "stopped"
        return f"<LocalCluster {self.num_workers} worker(s), {self.num_ps} ps, {self.mode}, {state}>"
