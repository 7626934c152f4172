"""Cluster processes that start in a fraction of a second: TensorFlow imported once, then forked.

Every task of a cluster is a process of its own, so that one can be killed. Importing TensorFlow
takes 2-3 s per process on this machine, and three tasks importing it at once on two cores took
6-12 s. The standard library's *forkserver* (``multiprocessing``) fixes that: one server process
imports the modules named in ``preload`` once, and every task is forked from it, already holding
them. Forking is safe only from a single-threaded process: the forkserver is one (TensorFlow's
runtime starts at the first op, not at import; numpy's OpenBLAS pool is kept to one thread by
``OPENBLAS_NUM_THREADS=1``, set before the server starts).

**Lifetime.** The server ends when every holder of the write end of its "alive" pipe has closed
it (CPython's ``multiprocessing/forkserver.py``, ``main``: EOF on ``alive_r`` raises SystemExit).
CPython hands that write end to every forked task too (``_serve_one`` stores it as
``_forkserver._forkserver_alive_fd``), so while a task lives the server never ends, and the task's
parent-death signal, which is tied to the server (its parent), never fires: seen as workers that
outlived their supervisor by 0.5 to more than 50 s. So each task closes that fd as it starts
(:func:`_child`), and the server lives exactly as long as its supervisor keeps it: a supervisor
that dies, even by SIGKILL, takes the server and with it every task, a moment later. A
supervisor that stops in order calls :func:`shutdown` after its tasks are gone: it ends the server
and multiprocessing's resource tracker and waits for both, so nothing it started outlives it.

:class:`ForkedProcess` gives a forked task the few ``subprocess.Popen`` methods the supervisors
use (``pid``, ``poll``, ``kill``, ``wait``, ``returncode``), so the supervisors treat both alike.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import tempfile

__all__ = ["ForkedProcess", "forkserver", "shutdown"]

_contexts: dict[tuple[str, ...], multiprocessing.context.BaseContext] = {}


def forkserver(preload: tuple[str, ...]) -> multiprocessing.context.BaseContext:
    """A forkserver context whose server imports ``preload`` once (one per set of modules)."""
    if preload not in _contexts:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"  # the server must stay single-threaded
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(preload))
        _contexts[preload] = context
    return _contexts[preload]


def shutdown() -> None:
    """Stop this process's forkserver and resource tracker, and wait until both have ended.

    Call it once every task is gone (:meth:`ForkedProcess.wait` returned). Both ``_stop`` methods
    are CPython's own (3.8 onwards; "used by unit tests"): each closes this process's end of its
    server's pipe and waits for it (``waitpid``). Without them the two end on their own only
    after this process has exited, and nobody waits for them.
    """
    from multiprocessing import forkserver as mp_forkserver, resource_tracker

    server = mp_forkserver._forkserver
    if server._forkserver_pid is not None:  # it holds nothing to save, and its orderly exit
        os.kill(server._forkserver_pid, signal.SIGKILL)  # (TensorFlow loaded) took 1-4 s here
    server._stop()  # closes our "alive" fd, waitpid()s the server, removes its socket
    resource_tracker._resource_tracker._stop()  # closes our fd to it, waitpid()s it


def _release_forkserver() -> None:
    """Close this task's copy of the forkserver's "alive" fd (see the module docstring)."""
    from multiprocessing import forkserver as mp_forkserver

    server = mp_forkserver._forkserver
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


def _child(target: str, args: tuple, log: str | None, name: str,
           tmpdir: str | None = None) -> None:
    """In the forked task: its output to ``log`` (or nowhere), its temporary files in ``tmpdir``,
    die with the forkserver, let the forkserver end without us, then run ``target``
    ("module:function", imported already by the forkserver's preload)."""
    if tmpdir is not None:  # e.g. autograph's generated modules: they go with that folder
        os.environ["TMPDIR"] = tempfile.tempdir = tmpdir
    sink = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    try:  # before the release below: the server cannot end while we hold its fd, so it is our
        import ctypes  # parent still when the signal is tied to it

        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the forkserver dies, we do
        libc.prctl(15, name.encode()[:15])  # PR_SET_NAME: what ps and /proc/PID/comm show
    except Exception:  # not Linux: the supervisor's own clean-up still kills its tasks
        pass
    _release_forkserver()
    module, _, function = target.partition(":")
    getattr(importlib.import_module(module), function)(*args)


class ForkedProcess:
    """A task forked from a forkserver, with the ``Popen`` methods the supervisors use."""

    def __init__(self, preload: tuple[str, ...], target: str, args: tuple = (),
                 log: str | None = None, name: str = "mirrortutor", tmpdir: str | None = None):
        # ``target`` is named ("module:function"), so the supervisor never imports what it runs;
        # ``name`` (15 characters at most) is the task's name in ps and /proc/PID/comm;
        # ``tmpdir``: the task's temporary folder (TMPDIR), when not this machine's usual one
        self._process = forkserver(preload).Process(target=_child,
                                                    args=(target, args, log, name, tmpdir))
        self._process.start()
        self.pid: int = self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once it ended (negative: killed by that signal), else None."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def kill(self) -> None:
        if self._process.exitcode is None:
            self._process.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        self._process.join(timeout)
        return self._process.exitcode
