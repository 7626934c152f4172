"""The sealed kernel's launcher: Linux namespaces, a private file system view and limits, in Python.

The grader's kernelspec (:mod:`mirrortutor.grading.sandbox`) runs
``python -m mirrortutor.grading.seal SPEC.json -f {connection_file}``. Three processes result,
the way ``unshare --fork --pid`` and bubblewrap arrange theirs:

1. the **launcher** (the pid Jupyter started): a helper child it forks first stays outside and
   writes its uid and gid maps (``user_namespaces(7)``), then the launcher is root of a new user
   namespace with its own mount, network and IPC namespaces. It waits for the init below and
   exits with its status; Jupyter's SIGTERM or SIGKILL (to the group) ends everything;
2. the **init**, pid 1 of a new PID namespace (``pid_namespaces(7)``): it builds the view on a
   size-limited tmpfs (``tmpfs(5)``), the Python environment and the package bound read-only at
   their own paths, a fresh ``/proc``, a few ``/dev`` nodes, the scratch folder with the student's
   copy, then ``pivot_root(2)`` and detaches the old root, so no other path exists. When it dies,
   the kernel kills every process left in the namespace (a fork bomb's too);
3. the **kernel**, pid 2: its limits set (``setrlimit(2)``), its privileges dropped (a user id of
   its own when the grader runs as root, as ``RLIMIT_NPROC`` is not enforced for root; no capabilities
   either way, ``capabilities(7)``), ``no_new_privs`` set, then ipykernel. Once its channels are
   bound (Unix sockets in the runtime folder, the only host folder it may write), it tells the
   init, which remounts that folder read-only before any cell runs. A forked copy of the kernel
   that finishes its cell ends there (a fork bomb's copies do not linger, spinning).

The network namespace holds only a loopback interface (up), so nothing outside can be reached.
Standard library only: this runs before anything else in every graded kernel.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import shutil
import signal
import sys

from ..clusters.processes import loopback_up

__all__ = ["HANDSHAKE_ENV", "main"]

NEWNS, NEWIPC, NEWUSER, NEWPID, NEWNET = 0x20000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # the syscall's number; glibc has no wrapper
HANDSHAKE_ENV = "MIRRORTUTOR_SEAL_FDS"  # "write,read": the kernel's pipes to the init
NOBODY = 65534  # the host user a root grader's kernel runs as (inside: uid 1)
DEVICES = ("null", "zero", "full", "random", "urandom")
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source} on {target}")


def _read_only(target: str) -> None:
    """Remount a bind mount read-only, keeping the flags the host locked (nosuid, nodev...)."""
    f = os.statvfs(target).f_flag
    kept = (f & (NOSUID | NODEV | NOEXEC)) | (f & 1024) | (f & 2048) | ((f & 4096) and 1 << 21)
    _mount(None, target, None, REMOUNT | BIND | RDONLY | NOSUID | NODEV | kept)


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def write_maps(pid: int, root: bool) -> None:
    """From outside: map the namespace's uid 0 to the grader's own ids, and, for a root grader,
    uid 1 to ``nobody`` (the kernel's user; written with root's ``CAP_SETUID``)."""
    uid, gid = os.geteuid(), os.getegid()
    extra = f"1 {NOBODY} 1\n" if root else ""
    if not root:
        with open(f"/proc/{pid}/setgroups", "w") as f:
            f.write("deny")
    for name, own in (("uid_map", uid), ("gid_map", gid)):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(f"0 {own} 1\n{extra}")


def _bind(source: str, root: str, rw: bool = False) -> None:
    target = root + source
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, BIND | REC)
    if not rw:
        with open("/proc/self/mountinfo") as f:  # the bind and any mount below it
            points = [line.split()[4] for line in f]
        for point in points:
            if point == target or point.startswith(target + "/"):
                _read_only(point)


def build_view(spec: dict, root: str) -> None:
    """The init's file system: everything the kernel will see, under ``root`` (a tmpfs)."""
    _mount(None, "/", None, REC | PRIVATE)
    _mount("tmpfs", root, "tmpfs", NOSUID | NODEV, f"size={spec['tmpfs_mb']}m,mode=0755")
    for path in spec["readonly"]:
        _bind(path, root)
    for name in os.listdir("/"):
        if os.path.islink("/" + name) and not os.path.lexists(root + "/" + name):  # /bin -> usr/bin
            os.symlink(os.readlink("/" + name), root + "/" + name)
    for path, real in spec.get("links", {}).items():  # a venv reached through a link (shown_links)
        if not os.path.lexists(root + path):  # shortest first: a longer one may lie through it
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(real, root + path)
    os.makedirs(root + "/dev/shm")
    for name in DEVICES:
        _bind("/dev/" + name, root, rw=True)
    for name, fd in (("fd", ""), ("stdin", "/0"), ("stdout", "/1"), ("stderr", "/2")):
        os.symlink("/proc/self/fd" + fd, f"{root}/dev/{name}")
    os.makedirs(root + "/proc")
    _mount("proc", root + "/proc", "proc", NOSUID | NODEV | NOEXEC)
    _bind(spec["runtime"], root, rw=True)
    os.makedirs(os.path.dirname(root + spec["answers_inside"]), exist_ok=True)
    open(root + spec["answers_inside"], "w").close()
    _mount(spec["answers"], root + spec["answers_inside"], None, BIND)
    scratch = root + spec["scratch"]
    os.makedirs(scratch, exist_ok=True)
    os.makedirs(root + "/tmp", exist_ok=True)
    if spec.get("submission"):
        shutil.copyfile(spec["submission"], os.path.join(scratch, "submission.ipynb"))
    if spec.get("programs"):  # the course's programs, which cells may run (a copy: its own)
        shutil.copytree(spec["programs"], os.path.join(scratch, "programs"),
                        ignore=shutil.ignore_patterns("__pycache__"))
    user = 1 if spec["nobody"] else 0
    for path in (root + "/tmp", root + "/dev/shm"):
        os.chmod(path, 0o1777)
    runtime = spec["runtime"]  # the channels' folder and the answers file are the host's
    owned = [scratch, *[os.path.join(scratch, n) for n in os.listdir(scratch)], runtime,
             spec["answers"], *[os.path.join(runtime, n) for n in os.listdir(runtime)]]
    for path in owned:
        os.chown(path, user, user)


def enter_view(root: str) -> None:
    os.chdir(root)
    number = PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root's system call number on {platform.machine()} is not known here")
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", 2), "detach the old root")  # MNT_DETACH
    os.chdir("/")


def drop_privileges(spec: dict) -> None:
    """In the kernel's process, before exec: limits, then no capabilities, ever again."""
    limits = spec["limits"]
    mb = 1 << 20
    for what, value in ((resource.RLIMIT_NPROC, limits["processes"]),
                        (resource.RLIMIT_DATA, limits["memory_mb"] * mb),
                        (resource.RLIMIT_FSIZE, limits["file_mb"] * mb),
                        (resource.RLIMIT_CPU, limits["cpu_s"]),
                        (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(what, (value, value))
    with open("/proc/self/oom_score_adj", "w") as f:  # the first the OOM killer takes
        f.write("1000")
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _prctl(24, cap)  # PR_CAPBSET_DROP
    _prctl(28, 0x01 | 0x02 | 0x20 | 0x40 | 0x80)  # PR_SET_SECUREBITS: NOROOT (locked), no ambient
    if spec["nobody"]:
        os.setgroups([])
        os.setresgid(1, 1, 1)
        os.setresuid(1, 1, 1)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS: no setuid binary gives anything back


def init(spec: dict) -> None:
    """pid 1: build the view, start the kernel, seal the runtime folder, reap, exit with it."""
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the launcher gone, the namespace goes
    root = spec["root_dir"]
    build_view(spec, root)
    enter_view(root)
    loopback_up()
    from_kernel, to_init = os.pipe()  # (read, write)
    from_init, to_kernel = os.pipe()
    kernel = os.fork()
    if kernel == 0:
        try:
            os.close(from_kernel), os.close(to_kernel)
            drop_privileges(spec)
            env = dict(spec["env"], **{HANDSHAKE_ENV: f"{to_init},{from_init}"})
            os.set_inheritable(to_init, True), os.set_inheritable(from_init, True)
            os.chdir(spec["scratch"])
            os.execve(spec["argv"][0], spec["argv"], env)
        finally:
            os._exit(127)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for the kernel's cell
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    os.close(to_init), os.close(from_init)
    if spec.get("handshake") and os.read(from_kernel, 1) == b"b":
        for point in _mounts_under(spec["runtime"]):
            _read_only(point)
        os.write(to_kernel, b"s")
    os.close(from_kernel), os.close(to_kernel)
    while True:
        pid, status = os.wait()
        if pid == kernel:
            os._exit(os.waitstatus_to_exitcode(status) % 256)


def _mounts_under(path: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [p for p in (line.split()[4] for line in f) if p == path or p.startswith(path + "/")]


def launch(spec: dict) -> int:
    """The launcher: namespaces, the init, its exit status."""
    go, ready = os.pipe()
    done, wrote = os.pipe()
    helper = os.fork()
    if helper == 0:  # stays in the host's namespaces: only it may write a root grader's maps
        status = 1
        try:
            if os.read(go, 1) == b"u":
                write_maps(os.getppid(), spec["nobody"])
                os.write(wrote, b"1")
                status = 0
        finally:
            os._exit(status)
    try:
        _check(_libc.unshare(NEWUSER | NEWNS | NEWNET | NEWIPC | NEWPID), "unshare")
    finally:
        os.write(ready, b"u")
        os.waitpid(helper, 0)
    if os.read(done, 1) != b"1":
        raise OSError("the uid and gid maps could not be written")
    child = os.fork()
    if child == 0:
        try:
            init(spec)
        except BaseException as exc:  # said on the kernel's stderr, which pytest's log keeps
            print(f"mirrortutor sandbox: {exc}", file=sys.stderr)
        os._exit(126)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: (os.kill(child, signal.SIGKILL), os._exit(143)))
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) % 256


def kernel(argv: list[str]) -> None:
    """The kernel itself: bind the channels, let the init seal the runtime folder, then serve."""
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(argv)
    fds = os.environ.pop(HANDSHAKE_ENV, "")
    if fds:
        to_init, from_init = map(int, fds.split(","))
        os.write(to_init, b"b")
        if os.read(from_init, 1) != b"s":
            sys.exit("mirrortutor sandbox: the runtime folder could not be sealed")
        os.close(to_init), os.close(from_init)
    master = os.getpid()

    def forked_copy_ends(*_) -> None:
        """A raw os.fork() child back in the kernel's loop would be a second kernel on the same
        channels (ipykernel refuses its messages; it spins): it ends when its cell does."""
        if os.getpid() != master:
            os._exit(0)

    def quiet_copy() -> None:  # the channels are the master's: a copy writing to them can hang
        sys.stdout = sys.stderr = open(os.devnull, "w")
        app.shell.showtraceback = lambda *_, **__: os._exit(1)  # nobody would see it: end now

    os.register_at_fork(after_in_child=quiet_copy)
    app.shell.events.register("post_run_cell", forked_copy_ends)
    app.start()


def main(argv: list[str]) -> int:
    if argv[:1] == ["kernel"]:
        kernel(argv[1:])
        return 0
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    spec["nobody"] = os.geteuid() == 0  # NPROC binds every user but root: the kernel is nobody
    spec.setdefault("argv", [sys.executable, "-m", "mirrortutor.grading.seal", "kernel", *argv[1:]])
    return launch(spec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
