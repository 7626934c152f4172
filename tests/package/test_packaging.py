"""Set-up files agree with each other: pyproject, environment.yml, Makefile, README, CI."""

from __future__ import annotations

import re
from importlib.metadata import requires
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _pins(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-\[\]]+)\s*==\s*([\w.]+)\s*", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_environment_yml_pins_the_same_versions_as_pyproject():
    """environment.yml's pip list pins exactly pyproject.toml's dependencies, version for version."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    declared = [r for r in requires("mirrortutor") if "extra ==" not in r]
    assert _pins(pip_section) == _pins(declared)
    assert len(_pins(declared)) == len(declared), "every dependency is pinned with =="
    assert "-e ." in pip_section and "conda-forge" in env["channels"]


def test_ci_runs_exactly_the_readme_test_command():
    """.ci/run runs `make test`, the command the README gives for running every test."""
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make test$", ci, flags=re.M)
    assert "make test" in readme and "make lab" in readme


def test_makefile_test_target_runs_package_tests_and_every_notebook():
    """`make test` runs pytest over tests/ and notebooks/ with nbval comparing outputs; the
    exercise keys run once, inside tests/grading, graded and compared cell by cell."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:")[1].split("\n\n")[0]
    assert "pytest" in recipe and "tests notebooks" in recipe and "$(NBVAL)" in recipe
    assert "--nbval " in makefile and "--nbval-lax" not in makefile
    # ... on the course's kernel (a private network namespace), which make installs first
    assert "--nbval-kernel-name mirrortutor" in makefile and "--nbval-current-env" not in makefile
    assert makefile.split("\ntest:")[1].split("\n")[0].strip() == "$(KERNEL)"
    grading = (ROOT / "tests" / "grading" / "test_grade.py").read_text()
    assert "def test_the_instructor_solution_scores_full_marks_and_matches_every_stored_output" in grading
    assert "for ex in sorted(KEYS" in grading  # every key in exercises/


def test_make_lab_serves_the_course(tmp_path):
    """`make lab` (the README's first command) starts JupyterLab serving every chapter, on the
    course's kernel only: a kernel it starts answers over Unix sockets (ipc), from a network
    namespace that holds nothing but its loopback."""
    import json
    import os
    import queue
    import secrets
    import socket
    import subprocess
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(8)
    args = f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} --IdentityProvider.token={token}"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path))
    lab = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                url = f"http://127.0.0.1:{port}/api/contents/notebooks?token={token}"  # from the repo
                listing = json.load(urllib.request.urlopen(url, timeout=5))
                break
            except OSError:
                assert lab.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        names = sorted(item["name"] for item in listing["content"] if item["type"] == "notebook")
        assert "00_welcome.ipynb" in names
        assert names == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
        api = f"http://127.0.0.1:{port}/api"
        specs = json.load(urllib.request.urlopen(f"{api}/kernelspecs?token={token}", timeout=10))
        assert specs["default"] == "mirrortutor" and list(specs["kernelspecs"]) == ["mirrortutor"]
        start = urllib.request.Request(f"{api}/kernels?token={token}", method="POST",
                                       data=json.dumps({"name": "mirrortutor"}).encode())
        kernel = json.load(urllib.request.urlopen(start, timeout=60))
        info = json.loads((tmp_path / f"kernel-{kernel['id']}.json").read_text())
        assert info["transport"] == "ipc" and info["ip"].startswith(str(tmp_path))
        from jupyter_client import BlockingKernelClient

        from mirrortutor.clusters.processes import netns_available

        client = BlockingKernelClient(connection_file=str(tmp_path / f"kernel-{kernel['id']}.json"))
        client.load_connection_file()
        client.start_channels()
        try:
            # Not wait_for_ready (its heartbeat check is flaky under load): ask kernel_info until
            # iopub answers too, so the subscription is live before we execute (ZeroMQ's SUB
            # socket drops what is published before it has joined).
            for _ in range(120):
                client.kernel_info()
                assert client.get_shell_msg(timeout=120)["msg_type"] == "kernel_info_reply"
                try:
                    client.get_iopub_msg(timeout=1)
                    break
                except queue.Empty:
                    continue
            while True:  # drain what kernel_info published
                try:
                    client.get_iopub_msg(timeout=0.2)
                except queue.Empty:
                    break
            out = []
            client.execute_interactive(
                "import socket; print([n for _, n in socket.if_nameindex()])", timeout=60,
                output_hook=lambda m: out.append(m["content"].get("text", "")))
        finally:
            client.stop_channels()
        if netns_available():  # the kernel lives in a network of its own: loopback only
            assert "".join(out).strip() == "['lo']"
    finally:
        os.killpg(lab.pid, 15)
        lab.wait(30)
