"""Processes, ports and containment for every cluster of the course (standard library only).

Both kinds of cluster run the same way: the notebook's kernel starts one small *supervisor* child
(the parameter-server agent, or the multi-worker launcher), usually under ``unshare -rn``; that
child starts the TensorFlow processes and watches them. This module holds what both sides share:

- :class:`Supervisor`, the kernel's end: start the child, talk to it in lines, stop it;
- :class:`Children`, the supervisor's end: kill and wait for its own children, and
  :meth:`Children.close`, which returns once nothing it started is alive;
- :class:`Janitor`: a folder removed when the kernel dies, even by SIGKILL;
- free ports on 127.0.0.1, and the private network namespace (:func:`netns_available`,
  :func:`private_network`, :func:`containment`, :func:`loopback_up`).

Why this shape: a kernel is multi-threaded, where ``subprocess``'s ``preexec_fn`` is unsafe
(Python's documentation), and Linux ties the parent-death signal to the *thread* that started a
child, so a cluster started from a helper thread would die with that thread. So the kernel's
children learn that the kernel died from their stdin closing, and only the supervisor's own
children (started from its main thread, which lives as long as it does) use the parent-death
signal, which they set themselves after starting. The kernel's children also run in a session
of their own: Jupyter interrupts a kernel by signalling its whole process group, and a Kernel →
Interrupt must stop the cell, not the cluster.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading

from ..errors import ClusterConfigError, ClusterStateError

__all__ = ["Children", "Janitor", "Supervisor", "alive", "check_port_free",
           "containment", "free_listeners", "free_ports", "loopback_up",
           "netns_available", "private_network"]

# ---- containment ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def netns_available() -> bool:
    """Whether this machine lets an ordinary user make a private network namespace."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


def private_network() -> bool:
    """Whether this process lives in a network namespace whose only interface is a loopback.

    That is what the course's kernel gets (``mirrortutor.clusters.kernel``): everything it and its
    children open there is out of reach of other hosts and of other users' processes.
    """
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return False
    return names == ["lo"]


def containment(contain: bool | None, what: str) -> bool:
    """Whether to run ``what`` in a private network namespace: ``None`` when possible, ``True``
    always (an error if impossible), ``False`` never."""
    if contain and not netns_available():
        raise ClusterConfigError(
            f"contain=True asked for {what} no other machine can reach, but this machine cannot "
            "make a private network namespace (`unshare -rn true` failed: unprivileged user "
            "namespaces are off, or this is not Linux). Pass contain=None to run uncontained "
            "with a warning, or enable user namespaces.")
    return netns_available() if contain is None else bool(contain)


def loopback_up() -> None:
    """Bring up ``lo`` in a fresh network namespace (it starts down), without needing ``ip``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    finally:
        sock.close()


def alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a dead child not yet waited for)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


# ---- ports ------------------------------------------------------------------------------------
def free_listeners(n: int, ports: list[int] | None = None) -> list[socket.socket]:
    """``n`` sockets listening on 127.0.0.1, at ``ports`` or at ports the OS picked (free)."""
    socks = []
    for port in ports or [0] * n:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        socks.append(sock)
    return socks


def free_ports(n: int) -> list[int]:
    """``n`` different ports that were free on 127.0.0.1 a moment ago."""
    socks = free_listeners(n)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def check_port_free(port: int) -> None:
    """Raise a plain :class:`ClusterConfigError` when ``port`` is taken on any interface."""
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ClusterConfigError(
                f"Port {port} is already in use on this machine ({exc.strerror}). A cluster "
                f"needs a free port for every task; leave ports=None to let it pick free ones, "
                f"or pass other port numbers.") from None
        finally:
            sock.close()


# ---- the kernel's end -------------------------------------------------------------------------
class Supervisor:
    """A supervisor child of the kernel, spoken to in lines on its stdin and stdout.

    It runs ``python -m <module> <args>`` (under ``unshare -rn`` when ``contained``), and stops
    when told ``quit`` or when its stdin closes, which happens when the kernel dies.
    """

    def __init__(self, module: str, args: list[str], *, contained: bool, pass_fds=(),
                 what: str = "the cluster's supervisor"):
        cmd = [sys.executable, "-m", module, *args]
        self.what = what
        self.proc = subprocess.Popen((["unshare", "-rn"] if contained else []) + cmd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     pass_fds=list(pass_fds), start_new_session=True)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read_line(self) -> str:
        """The supervisor's next line ("" if it ended)."""
        return self.proc.stdout.readline().strip()

    def expect(self, word: str, doing: str, hint: str) -> str:
        """Read a line that starts with ``word``; otherwise stop everything and say so."""
        line = self.read_line() if self.proc else ""
        if line.split(maxsplit=1)[:1] != [word]:
            self.stop()
            raise ClusterStateError(
                f"Could not {doing}: {self.what} answered {line or 'nothing'!r} where "
                f"'{word}' was expected. {hint}")
        return line

    def stop(self, timeout: float = 30.0) -> None:
        """Say ``quit``, close its stdin, wait; kill it if it does not end. Safe to call twice.
        The supervisor ends only after all it started (:meth:`Children.close`): so do they."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.write("quit\n")
            proc.stdin.close()
            proc.wait(timeout=timeout)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        proc.stdout.close()


class Janitor:
    """Removes ``path`` when the kernel dies, however it dies (a SIGKILL included).

    A tiny ``sh`` child waits on its stdin; when the kernel ends, the pipe closes and the child
    removes the folder. :meth:`done` removes it at once (the normal way out); :meth:`keep` tells
    the child to leave it (kept on purpose, e.g. ``debug=True``).
    """

    # EOF without a word: the kernel died. Twice, in case a dying worker still wrote a file.
    SCRIPT = ('read -r word; case "$word" in keep|done) exit 0;; esac; '
              'rm -rf -- "$1"; sleep 1; rm -rf -- "$1"')

    def __init__(self, path: str):
        self.path = path
        self.proc = subprocess.Popen(["sh", "-c", self.SCRIPT, "mirrortutor-janitor", path],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)

    def _tell(self, word: str) -> None:
        try:
            self.proc.stdin.write(word.encode() + b"\n")
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def done(self) -> None:
        """Remove the folder now, and let the child go."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._tell("done")

    def keep(self) -> None:
        """Leave the folder where it is, and let the child go."""
        self._tell("keep")


# ---- the supervisor's end ---------------------------------------------------------------------
class Children:
    """The TensorFlow processes one supervisor started, by key."""

    def __init__(self):
        self.procs: dict[object, subprocess.Popen] = {}

    def adopt(self, key, proc) -> None:
        """Keep ``proc`` (a forked task, :class:`~.forkserver.ForkedProcess`) as ``key``."""
        self.procs[key] = proc

    def kill(self, key) -> None:
        proc = self.procs.pop(key, None)
        if proc is not None:
            proc.kill()
            proc.wait()

    def kill_all(self) -> None:
        """Kill every child and wait until each is gone (a forked one: reaped by its server)."""
        for key in list(self.procs):
            self.kill(key)

    def close(self) -> None:
        """Kill every child, then end the forkserver and resource tracker and wait for them: when
        this returns, no process this supervisor started is alive (see
        :mod:`~mirrortutor.clusters.forkserver`, "Lifetime")."""
        self.kill_all()
        if "multiprocessing.forkserver" in sys.modules:  # only if a task was ever forked
            from .forkserver import shutdown

            shutdown()

    def on_stdin_closed(self) -> threading.Event:
        """An event set when stdin closes: the kernel said ``quit`` and closed it, or died."""
        closed = threading.Event()

        def watch() -> None:
            sys.stdin.read()
            closed.set()

        threading.Thread(target=watch, daemon=True).start()
        return closed
