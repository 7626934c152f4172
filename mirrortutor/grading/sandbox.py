"""Where each submission runs: a sealed kernel (the default), or the teacher's own, when told so.

:func:`seal` prepares one submission's run for :mod:`mirrortutor.grading.grade`: a kernelspec of
its own (found through ``JUPYTER_PATH``) whose kernel :mod:`mirrortutor.grading.seal` starts in
new user, mount, PID, network and IPC namespaces. Inside, the kernel sees

- its scratch folder (``/home/student``, with ``submission.ipynb``, the student's copy, and a
  copy of the course's ``programs/`` when the key has one beside its folder, so that a cell's
  ``cluster.run_program("programs/08_worker.py")`` finds it as in the course) and ``/tmp``, on a
  tmpfs of :attr:`Limits.tmpfs_mb` that holds every file it can write;
- read-only: the system's ``/usr`` and ``/etc``, this Python (``sys.prefix``, ``sys.base_prefix``)
  and the ``mirrortutor`` package, at their own paths;
- the file its checks append their answers to (bound in, at most :attr:`Limits.file_mb`), and
  the folder of its own channels (read-only once they are bound);
- no network but its own loopback, no process but its own, and the limits of :class:`Limits`.

The key, the other submissions, the grades, ``$HOME`` and every other path do not exist there.
:func:`probe` tries the whole set-up once per process; where it fails (macOS, a container that
refuses namespaces) grading stops with :class:`~mirrortutor.errors.SandboxError`, unless the
teacher passed ``trust=True`` (``--trust-submissions``): then every report says the run was not
sealed.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import SandboxError

__all__ = ["ANSWERS_INSIDE", "KERNEL_NAME", "SCRATCH", "Limits", "Run", "kernel_env", "probe",
           "require", "seal", "shown_paths"]

KERNEL_NAME = "mirrortutor-sealed"
ANSWERS_INSIDE = "/run/mirrortutor/answers.jsonl"  # where the kernel's checks append their answers
SCRATCH = "/home/student"
#: What the kernel inherits from the grader's environment; everything else is left out.
ENV_KEPT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "PYTHONHASHSEED",
            "TF_CPP_MIN_LOG_LEVEL", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Limits:
    """What one sealed kernel (with every process it starts) may use."""

    # RLIMIT_NPROC: tasks (threads count) of the kernel's user in its namespace. A TensorFlow
    # cluster needs many (285 for exercise 08's on 2 cores; thread pools grow with the cores)
    processes: int = field(default_factory=lambda: max(1024, 128 * (os.cpu_count() or 1)))
    memory_mb: int = 8192  # RLIMIT_DATA of each process (its heap and anonymous memory)
    file_mb: int = 64  # RLIMIT_FSIZE: the largest file it may write
    cpu_s: int = 3600  # RLIMIT_CPU of each process
    tmpfs_mb: int = 512  # every file it writes, together (scratch, /tmp, /dev/shm)


@dataclass(frozen=True)
class Run:
    """One prepared sealed run: the kernel to ask nbval for, and the environment pytest needs."""

    kernel: str  # the kernelspec's name
    env: dict[str, str]  # added to pytest's environment (JUPYTER_PATH, JUPYTER_RUNTIME_DIR)
    answers: Path  # the host file the kernel's checks append to


def shown_paths() -> list[str]:
    """Host paths the kernel sees, read-only: the system, this Python, the package."""
    package = Path(__file__).resolve().parents[1]  # mirrortutor/
    paths = ["/usr", "/etc", sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(package)]
    paths += [f"/{d}" for d in ("bin", "sbin", "lib", "lib32", "lib64")
              if os.path.isdir(f"/{d}") and not os.path.islink(f"/{d}")]
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    return [p for p in real if not any(p.startswith(q + "/") for q in real)]


def shown_links() -> dict[str, str]:
    """``{path: where it leads}`` for this Python's folders reached through a symbolic link (a
    venv that is a link to another, say): the view binds the real folder (:func:`shown_paths`), so
    the kernel, started by the link's path (``sys.executable``), needs the same link inside."""
    paths = [sys.prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    links = {os.path.abspath(p): os.path.realpath(p) for p in paths}
    return {p: real for p, real in sorted(links.items()) if p != real}


def kernel_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_KEPT or k.startswith("LC_")}
    env.setdefault("PATH", "/usr/bin:/bin")
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env["PATH"]])
    return {**env, "HOME": SCRATCH, "TMPDIR": "/tmp", "MIRRORTUTOR_ANSWERS": ANSWERS_INSIDE,
            "MPLCONFIGDIR": "/tmp/matplotlib", "PYTHONDONTWRITEBYTECODE": "1"}


def _spec(private: Path, submission: Path | None, limits: Limits, answers: Path,
          programs: Path | None = None) -> dict:
    (private / "view").mkdir()
    (private / "run").mkdir(mode=0o700)
    answers.touch()
    return {"readonly": shown_paths(), "links": shown_links(), "root_dir": str(private / "view"),
            "runtime": str(private / "run"), "answers": str(answers),
            "answers_inside": ANSWERS_INSIDE, "scratch": SCRATCH,
            "submission": str(submission) if submission else None,
            "programs": str(programs) if programs else None, "tmpfs_mb": limits.tmpfs_mb, "limits": asdict(limits), "env": kernel_env(),
            "handshake": True}


def seal(private: Path, submission: Path | None = None, limits: Limits = Limits(),
         env: dict[str, str] | None = None, programs: Path | None = None) -> Run:
    """Prepare a sealed kernel in ``private`` (a folder of the grader's, outside the view);
    ``env``: variables the kernel gets besides :func:`kernel_env`'s; ``programs``: a folder
    copied into the scratch folder as ``programs/``."""
    spec = _spec(private, submission, limits, private / "answers.jsonl", programs)
    spec["env"].update(env or {})
    (private / "seal.json").write_text(json.dumps(spec), encoding="utf-8")
    kernels = private / "jupyter" / "kernels" / KERNEL_NAME
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        # C-level output (a cluster worker's TensorFlow logs) is not a cell's, as under pytest's
        # own kernels (ipykernel leaves fds alone when PYTEST_CURRENT_TEST is set) and the keys'
        "argv": [sys.executable, "-m", "mirrortutor.grading.seal", str(private / "seal.json"),
                 "-f", "{connection_file}", "--IPKernelApp.capture_fd_output=False"],
        "display_name": "Python 3 (mirrortutor, sealed for grading)", "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"kernel_provisioner": {"provisioner_name": "mirrortutor-contained"}}}))
    path = os.pathsep.join(filter(None, [str(private / "jupyter"), os.environ.get("JUPYTER_PATH")]))
    return Run(KERNEL_NAME, {"JUPYTER_PATH": path, "JUPYTER_RUNTIME_DIR": spec["runtime"]},
               private / "answers.jsonl")


@functools.lru_cache(maxsize=1)
def probe() -> str | None:
    """``None`` when a sealed kernel can be made here, else why not (tried once per process):
    the launcher builds the whole view and runs a Python inside that must not see its folder."""
    if not sys.platform.startswith("linux"):
        return f"this is {sys.platform}, and the sandbox needs Linux's namespaces"
    with tempfile.TemporaryDirectory(prefix="mt-probe-") as folder:
        private = Path(folder)
        spec = _spec(private, None, Limits(), private / "answers.jsonl")
        test = f"import os, sys; sys.exit(3 if os.path.exists({folder!r} + '/seal.json') else 0)"
        spec.update(handshake=False, argv=[sys.executable, "-c", test])
        (private / "seal.json").write_text(json.dumps(spec), encoding="utf-8")
        try:
            done = subprocess.run([sys.executable, "-m", "mirrortutor.grading.seal",
                                   str(private / "seal.json")], capture_output=True, text=True,
                                  timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the sandbox's launcher did not run ({exc})"
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[-300:] or f"exit status {done.returncode}"
        return f"the sandbox could not be made ({said})"
    return None


def require(trust: bool, *paths: Path) -> bool:
    """Whether this run is sealed: True, or, with ``trust``, False where sealing is impossible.

    Raises :class:`SandboxError` when it cannot be made and ``trust`` is not given, or when one of
    ``paths`` (the key, the submissions, the grades) lies in a folder the kernel is shown.
    """
    reason = probe()
    if reason is not None:
        if trust:
            return False
        raise SandboxError(
            f"grading runs every submission in a sealed sandbox, and {reason}. Grade on Linux "
            "with user namespaces enabled (sysctl kernel.unprivileged_userns_clone=1, or outside a "
            "container that refuses them), or pass --trust-submissions to run them as yourself, "
            "able to read the key and change the grades (every report will say so).")
    shown = shown_paths()
    for path in paths:
        real = os.path.realpath(path)
        inside = next((p for p in shown if real == p or real.startswith(p + "/")), None)
        if inside:
            raise SandboxError(
                f"{path} lies in {inside}, which the sealed kernel is shown (read-only) so that it "
                "can run Python; a submission could read it there. Move it elsewhere.")
    return True
