"""The course where `make` cannot run: a hosted notebook (Colab, a JupyterHub, Binder).

There, students get `pip install` and the default ``python3`` kernel: no `make`, no course kernel
(mirrortutor/clusters/kernel.py), and usually no ``unshare`` (Docker's default seccomp profile
refuses the user namespace it needs). These tests build that setting here, cheaply:

- a fresh virtual environment, and in it ``pip install --no-deps`` of the package from a copy of
  this checkout (a real wheel build and install, no editable link to the repository). Its
  dependencies are the pinned ones already installed in the test's own environment, reached
  through a ``.pth`` line rather than downloaded again (minutes, and network, for the same files);
- chapters 00–05 (everything before the clusters) run under nbval in that environment's default
  ``python3`` kernel, with the same sanitizer `make test` uses, read from the installed package:
  every stored output compared. In `make test` this is those chapters' only nbval run
  (tests/conftest.py deselects their course-kernel run when this test is selected);
- with ``unshare`` refused (a shim earlier on ``PATH`` that exits 1, which is what
  :func:`mirrortutor.clusters.processes.netns_available` runs), chapter 06's cluster
  (``mt.LocalCluster(workers=2, ps=2, mode="process")``) starts in that kernel, uncontained, with
  the ``ExposedPortWarning`` the README promises, and stops.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOSTED_CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("0[0-5]*_*.ipynb"))


def _env(extra_path: Path | None = None) -> dict:
    """This process's environment without what points at the repository or its venv."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    if extra_path is not None:
        env["PATH"] = f"{extra_path}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def hosted(tmp_path_factory) -> Path:
    """A fresh venv with mirrortutor pip-installed from a copy of the checkout; its python."""
    root = tmp_path_factory.mktemp("hosted")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True)
    # the pinned dependencies, as a plain path: that folder's own .pth files (the repository's
    # editable install among them) are not read, so only the wheel below provides mirrortutor
    Path(purelib.stdout.strip(), "dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    source = root / "source"
    shutil.copytree(ROOT / "mirrortutor", source / "mirrortutor",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--disable-pip-version-check", "--no-deps", "--ignore-installed",
                    "--no-build-isolation", str(source)], check=True, env=_env())
    return python


def _run(python: Path, code: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, **kw)


def test_the_package_installs_with_pip_alone(hosted):
    """mirrortutor imports from the new environment's site-packages (not the repository), and
    the default kernel `python3` is that environment's own Python."""
    done = _run(hosted, """
        import json, sys
        import mirrortutor
        from jupyter_client.kernelspec import KernelSpecManager
        spec = KernelSpecManager().get_kernel_spec("python3")
        print(json.dumps([mirrortutor.__file__, spec.argv[0], sys.prefix]))
        """, env=_env(), cwd=hosted.parent.parent)
    assert done.returncode == 0, done.stderr
    package, kernel_python, prefix = json.loads(done.stdout)
    assert Path(package).is_relative_to(Path(prefix) / "lib"), package
    assert not Path(package).is_relative_to(ROOT)
    assert Path(kernel_python).parent == hosted.parent


def test_chapters_00_to_05_pass_nbval_on_the_default_python3_kernel(hosted, tmp_path):
    """Chapters 00–05, run on the hosted set-up's `python3` kernel, reproduce every stored
    output nbval compares (the course kernel's sanitizer, from the installed package). The
    programs a chapter runs sit beside it, as they do in a clone of the course."""
    assert len(HOSTED_CHAPTERS) == 7, HOSTED_CHAPTERS  # 00–05, and 04b: chapter 04's second part
    for name in HOSTED_CHAPTERS:
        shutil.copy(ROOT / "notebooks" / f"{name}.ipynb", tmp_path)
    shutil.copytree(ROOT / "programs", tmp_path / "programs")
    cfg = _run(hosted, "import mirrortutor.grading as g, pathlib; "
                       "print(pathlib.Path(g.__file__).parent / 'nbval_sanitize.cfg')",
               env=_env()).stdout.strip()
    done = subprocess.run(
        [str(hosted), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={tmp_path}",
         "--nbval", "--nbval-kernel-name", "python3", "--nbval-sanitize-with", cfg,
         "--nbval-cell-timeout=600", *[f"{n}.ipynb" for n in HOSTED_CHAPTERS]],
        cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


CLUSTER = """
import json, warnings
import mirrortutor as mt
from mirrortutor.clusters.processes import netns_available, private_network

devices = mt.setup(8)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cluster = mt.LocalCluster(workers=2, ps=2, mode="process")  # chapter 06's cluster
    cluster.start()
info = cluster.info
cluster.stop()
print(json.dumps({"netns": netns_available(), "private": private_network(),
                  "contained": info.contained, "exposed": len(info.exposed_ports),
                  "warnings": [type(w.message).__name__ for w in caught]}))
"""


def test_chapter_06_cluster_warns_when_unshare_is_refused(hosted, tmp_path):
    """With `unshare` refused, chapter 06's cluster still starts on the default kernel,
    uncontained, and says so with ExposedPortWarning."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "unshare").write_text(
        "#!/bin/sh\necho 'unshare: Operation not permitted' >&2\nexit 1\n")
    (shim / "unshare").chmod(0o755)
    driver = f"""
        import json, nbformat
        from nbclient import NotebookClient
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell({CLUSTER!r})])
        NotebookClient(nb, kernel_name="python3", timeout=300).execute()
        outs = nb.cells[0].outputs
        print([o for o in outs if o.get("name") == "stdout"][-1]["text"].strip().splitlines()[-1])
        """
    done = _run(hosted, driver, env=_env(shim), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["netns"] is False and seen["private"] is False
    assert seen["contained"] is False and seen["exposed"] == 5  # 2 workers, 2 ps, the chief
    assert "ExposedPortWarning" in seen["warnings"]
