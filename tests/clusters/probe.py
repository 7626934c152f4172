"""Who can reach the course: a probe of every listening socket a notebook kernel and its clusters own.

It starts a real Jupyter kernel (by kernelspec name, as JupyterLab and nbval do), starts clusters in
it, then lists every TCP socket the kernel's process tree listens on (read from /proc, in whatever
network namespace each process lives) and tries to reach each one

- from a *peer network namespace*, over a veth pair (another host, as far as the kernel can tell):
  ``ip netns add`` + ``ip link add ... type veth``, when this process may create them (root);
- as *another local user* (uid 65534) on this host's loopback, and on the kernel's own sockets
  (TCP ports, or the Unix sockets of Jupyter's ``ipc`` transport).

Every connection goes only to addresses of this machine's own namespaces. Run it by hand to see
the table: ``.venv/bin/python tests/clusters/probe.py [KERNEL_NAME]``; the tests call :func:`probe`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

#: The veth pair's addresses: IPv4 link-local, on links this probe makes and removes itself.
HOST_IP, PEER_IP = "169.254.181.1", "169.254.181.2"
OTHER_UID = 65534  # "nobody"
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by every user (the venv may live under /root)


# ---- what listens -----------------------------------------------------------------------------
def process_tree(root: int) -> list[int]:
    """``root`` and every living descendant (read from /proc)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(pid)] = int(fields[1])
    tree, grew = {root}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in tree} - tree
        tree |= new
        grew = bool(new)
    return sorted(p for p in tree if p in parents)


def _netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _address(hex_addr: str) -> str:
    if len(hex_addr) == 8:  # IPv4, little-endian
        return ".".join(str(int(hex_addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
    words = [hex_addr[i:i + 8] for i in range(0, 32, 8)]
    raw = b"".join(bytes.fromhex(w)[::-1] for w in words)
    import ipaddress
    return str(ipaddress.IPv6Address(raw))


def _what(pid: int) -> str:
    comm = open(f"/proc/{pid}/comm").read().strip()  # forked tasks name themselves "mt ps 0"
    if comm.startswith("mt mw worker"):
        return "multi-worker worker"
    if comm.startswith("mt "):
        return comm[3:]
    args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    words = [a.decode(errors="replace") for a in args if a]
    for key, name in (("ipykernel", "kernel"), ("clusters.kernel", "kernel"),
                      ("clusters.agent", None), ("clusters.program_worker", "multi-worker worker"),
                      ("clusters.launcher", "multi-worker launcher")):
        if any(key in w for w in words):
            if name is None:  # the agent, or a task it serves
                return f"{words[-3]} {words[-2]}" if "serve" in words else "ps agent (relay)"
            return name
    return os.path.basename(words[0]) if words else "?"


def listeners(root: int) -> list[dict]:
    """Every TCP socket in LISTEN state held by ``root``'s process tree, in whichever network
    namespace it was made (a process can hold a socket of another namespace: a passed fd)."""
    host_ns = _netns(os.getpid())
    tables = {}  # netns -> LISTEN lines of its tcp and tcp6 tables
    held = {}  # socket inode -> pid holding it
    for pid in process_tree(root) + [os.getpid()]:
        try:
            ns = _netns(pid)
            if ns not in tables:
                tables[ns] = [line.split() for t in ("tcp", "tcp6")
                              for line in open(f"/proc/{pid}/net/{t}").read().splitlines()[1:]]
            if pid == os.getpid():
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    held.setdefault(link[8:-1], pid)
        except OSError:
            continue
    found = []
    for ns, lines in tables.items():
        for fields in lines:
            if fields[3] == "0A" and fields[9] in held:
                pid = held[fields[9]]
                addr, port = fields[1].split(":")
                found.append({"pid": pid, "what": _what(pid), "address": _address(addr),
                              "port": int(port, 16), "host_netns": ns == host_ns})
    return found


# ---- who can connect --------------------------------------------------------------------------
_CLIENT = r'''
import json, socket, sys
out = []
for kind, target in json.loads(sys.argv[1]):
    try:
        if kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(2); s.connect(target)
        else:
            s = socket.create_connection(tuple(target), timeout=2)
        s.close(); out.append("answered")
    except PermissionError:
        out.append("permission denied")
    except OSError as e:
        out.append(type(e).__name__)
print(json.dumps(out))
'''


def _try(prefix: list[str], targets: list, **popen) -> list[str]:
    if not targets:
        return []
    result = subprocess.run(prefix + [SYSTEM_PYTHON, "-c", _CLIENT, json.dumps(targets)],
                            capture_output=True, text=True, timeout=120, **popen)
    if result.returncode:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout)


def can_make_peer() -> bool:
    return os.geteuid() == 0 and subprocess.run(["ip", "netns", "list"],
                                                capture_output=True).returncode == 0


@contextlib.contextmanager
def peer_namespace():
    """A network namespace joined to this one by a veth pair; yields its name."""
    tag = str(os.getpid())[-6:]
    ns, host_end, peer_end = f"mtprobe{tag}", f"mtph{tag}", f"mtpp{tag}"
    steps = [["ip", "netns", "add", ns],
             ["ip", "link", "add", host_end, "type", "veth", "peer", "name", peer_end],
             ["ip", "link", "set", peer_end, "netns", ns],
             ["ip", "addr", "add", f"{HOST_IP}/30", "dev", host_end],
             ["ip", "link", "set", host_end, "up"],
             ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{PEER_IP}/30", "dev", peer_end],
             ["ip", "netns", "exec", ns, "ip", "link", "set", peer_end, "up"],
             ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        yield ns
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def reachability(sockets: list[dict], unix_paths: list[str], peer: str | None) -> dict:
    """Try each listening port from the peer namespace and as another user on loopback, and each
    Unix socket as another user. Returns ``{"peer": [...], "other_user": [...], "unix": [...]}``."""
    ports = sorted({s["port"] for s in sockets})
    out = {"peer": None, "other_user": [], "unix": []}
    if peer is not None:
        out["peer"] = _try(["ip", "netns", "exec", peer], [["tcp", [HOST_IP, p]] for p in ports])
    other = dict(user=OTHER_UID, group=OTHER_UID, extra_groups=[], cwd="/")
    out["other_user"] = _try([], [["tcp", ["127.0.0.1", p]] for p in ports], **other)
    out["unix"] = _try([], [["unix", p] for p in unix_paths], **other)
    out["ports"] = ports
    return out


# ---- one kernel, its clusters, and the probe --------------------------------------------------
#: A plain TF multi-worker program that runs as long as asked (the kernel's second cluster runs it).
STEPS = str(Path(__file__).resolve().parent / "programs" / "steps.py")
SCENARIO = {
    "process": textwrap.dedent('''
        import warnings, time
        import mirrortutor as mt
        mt.setup(4, quiet=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cluster = mt.LocalCluster(workers=2, ps=1, mode="process").start()
            mw = mt.MultiWorkerCluster(workers=2).start()
            running = mw.submit_program(STEPS, "--steps", "20000", record=False)
        time.sleep(20)  # the multi-worker workers import TensorFlow and open their ports
        print("WARNINGS", len(caught), [type(w.message).__name__ for w in caught])
        ''').replace("STEPS", repr(STEPS)),
    "in_process": textwrap.dedent('''
        import warnings
        import mirrortutor as mt
        mt.setup(4, quiet=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cluster = mt.LocalCluster(workers=2, ps=1, mode="in_process").start()
        print("WARNINGS", len(caught), [type(w.message).__name__ for w in caught])
        '''),
}


def run_in_kernel(kernel_name: str, code: str, timeout: float = 300, env: dict | None = None):
    """Start kernel ``kernel_name``, run ``code``; return (manager, client, printed text)."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name=kernel_name)
    km.start_kernel(extra_arguments=["--IPKernelApp.capture_fd_output=False"],
                    **({"env": env} if env is not None else {}))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    printed = []

    def keep(msg):
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            printed.append("\n".join(msg["content"]["traceback"]))

    kc.execute_interactive(code, timeout=timeout, output_hook=keep)
    return km, kc, "".join(printed)


def probe(kernel_name: str, scenario: str, env: dict | None = None) -> dict:
    """Start a kernel, run ``scenario`` in it, and report who can reach what it opened."""
    km, kc, printed = run_in_kernel(kernel_name, SCENARIO[scenario], env=env)
    try:
        info = km.get_connection_info()
        pid = km.provisioner.pid
        sockets = listeners(pid)
        unix = [f"{info['ip']}-{info[name]}" for name in
                ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")] \
            if info["transport"] == "ipc" else []
        if info["transport"] == "tcp":  # the kernel's own ZMQ ports are part of the course too
            assert any(s["what"] == "kernel" for s in sockets)
        with (peer_namespace() if can_make_peer() else contextlib.nullcontext()) as peer:
            reach = reachability(sockets, unix, peer)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return {"kernel": kernel_name, "scenario": scenario, "transport": info["transport"],
            "kernel_netns_private": not all(s["host_netns"] for s in sockets if s["what"] == "kernel")
            if sockets else None,
            "printed": printed, "sockets": sockets, "reach": reach}


def table(report: dict) -> str:
    """The probe's findings, one line per listening socket."""
    reach = report["reach"]
    by_port = dict(zip(reach["ports"], zip(reach["peer"] or [None] * len(reach["ports"]),
                                           reach["other_user"])))
    lines = [f"kernel {report['kernel']!r}, scenario {report['scenario']!r}, transport "
             f"{report['transport']}; {len(report['sockets'])} listening socket(s)",
             f"{'owner':24s} {'address':>16s} {'port':>6s} {'netns':>8s} {'peer ns':>20s} "
             f"{'other user':>20s}"]
    for s in sorted(report["sockets"], key=lambda s: (s["what"], s["port"])):
        peer, other = by_port[s["port"]]
        lines.append(f"{s['what']:24s} {s['address']:>16s} {s['port']:6d} "
                     f"{'host' if s['host_netns'] else 'private':>8s} {str(peer):>20s} "
                     f"{other:>20s}")
    for path, answer in zip([f"ipc socket {i}" for i in range(len(reach["unix"]))], reach["unix"]):
        lines.append(f"{'kernel ' + path:24s} {'(unix)':>16s} {'':>6s} {'':>8s} {'':>20s} "
                     f"{answer:>20s}")
    return "\n".join(lines)


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "mirrortutor"
    for scenario in sys.argv[2:] or ["process", "in_process"]:
        t0 = time.monotonic()
        report = probe(name, scenario)
        print(table(report))
        print(f"({time.monotonic() - t0:.0f} s)\n")
