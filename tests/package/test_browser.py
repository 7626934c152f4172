"""Chapter 5 as a student meets it: JupyterLab in a real headless Chromium, panel and all.

Starts JupyterLab on 127.0.0.1 (a copy of the chapter in a temporary folder, so nothing in the
repository is touched: its set-up cells and its panel, :func:`_setup_and_panel`), opens it in
Debian's Chromium driven by Playwright (no browser download: `make test` installs the
`chromium` package where it can), runs every cell, moves the replica slider, clicks Run, and
checks that the charts redrew for the new replica count. A screenshot is kept in
artifacts/browser/ for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _setup_and_panel(path: Path) -> "nbformat.NotebookNode":
    """Chapter 5 as the panel needs it: every cell up to the one defining ``run_training`` (§1's
    set-up and model, §2's program and function), then §7, the panel. The cells between them run
    under nbval (tests/package/test_hosted.py, the chapter's only nbval run); here they would
    only add a minute of training before the panel appears."""
    nb = nbformat.read(path, as_version=4)
    defined = next(i for i, c in enumerate(nb.cells) if "def run_training(" in c.source)
    panel = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## 7 · The experiment panel"))
    nb.cells = nb.cells[:defined + 1] + nb.cells[panel:]
    assert any("ScalingLab(run_training" in c.source for c in nb.cells[defined + 1:]), "no panel"
    return nb


def _lab_kernel_flags() -> list[str]:
    """The kernel flags `make lab` passes (the Makefile's ``LAB_KERNEL``): only the course's kernel
    is offered, so the notebook (which names ``python3``) opens on it, as a student's does."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("LAB_KERNEL :="))
    return line.split(":=", 1)[1].split()


@pytest.fixture
def jupyterlab(tmp_path):
    """JupyterLab serving a copy of chapter 5 on 127.0.0.1, with `make lab`'s kernel flags;
    yields (url, folder)."""
    from mirrortutor.clusters.kernel import installed

    assert installed(), ("the course's kernel is not installed: run `make test`, or "
                         "`python -m mirrortutor.clusters.kernel install` first.")
    assert Path(CHROMIUM).exists(), (
        "Chromium is needed for the browser test: `make test` installs Debian's `chromium` "
        "package when it runs as root; otherwise install it (sudo apt-get install chromium).")
    served = tmp_path / "course"
    served.mkdir()
    nbformat.write(_setup_and_panel(ROOT / "notebooks" / "05_scaling_experiments.ipynb"),
                   served / "05_scaling_experiments.ipynb")
    # The chapter runs programs/05_scaling.py, found beside the notebook's folder as in the course.
    shutil.copytree(ROOT / "programs", tmp_path / "programs")
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no news or update checks: there is no network anyway
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"))
    log = open(tmp_path / "lab.log", "w")
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={served}",
         *_lab_kernel_flags()],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert lab.poll() is None and time.monotonic() < deadline, (
                    (tmp_path / "lab.log").read_text())
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/lab/tree/05_scaling_experiments.ipynb?token={token}", served
    finally:
        lab.terminate()
        try:
            lab.wait(20)
        except subprocess.TimeoutExpired:
            lab.kill()
        log.close()


def _trace_count(page) -> int:
    """Lines drawn in the panel's loss chart (the first plotly chart of the last output)."""
    return page.locator(".jp-OutputArea-output .widget-vbox .js-plotly-plot").first.locator(
        "g.trace").count()


STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


def _wait_for_panel(page, slider, log: Path, timeout_s: float = 480) -> None:
    """Wait until the panel's replica slider shows, failing at once, with what the page shows,
    when a cell raised (the chapter plans none), or a dialog opened (a kernel that died, a kernel
    not found): Run All stops there, and the panel would never come."""
    deadline = time.monotonic() + timeout_s
    while not (slider.count() and slider.is_visible()):
        unexpected = page.locator(STDERR, has_text="Traceback").all_inner_texts()
        dialogs = page.locator(".jp-Dialog").all_inner_texts()
        if unexpected or dialogs or time.monotonic() > deadline:
            prompts = page.locator(".jp-InputArea-prompt").all_inner_texts()
            lab_log = log.read_text()[-3000:] if log.exists() else "(no log)"
            raise AssertionError(
                "chapter 05's panel did not appear: "
                + ("a cell raised:\n" + "\n---\n".join(e[-2500:] for e in unexpected)
                   if unexpected else "")
                + (f"a dialog is open: {dialogs}" if dialogs else "")
                + (f"no slider after {timeout_s:.0f} s" if not (unexpected or dialogs) else "")
                + f"\ncell prompts: {' '.join(p.strip() for p in prompts)}"
                + f"\nJupyterLab's log (end):\n{lab_log}")
        page.wait_for_timeout(2000)


def test_chapter5_panel_in_a_real_browser(jupyterlab):
    """Run chapter 5 in Chromium on the course's kernel, set 2 replicas, click Run: the charts
    gain that run's lines, labelled with its replica count and global batch (16 per replica × 2)."""
    from playwright.sync_api import expect, sync_playwright

    from mirrortutor.clusters.kernel import DISPLAY_NAME

    url, served = jupyterlab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            shot = ARTIFACTS / "chapter05_failure.png"  # replaced by the panel's picture on success
            page.goto(url)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            expect(page.locator(".jp-Notebook-ExecutionIndicator, #jp-main-statusbar")
                   .first).to_be_visible(timeout=60_000)
            # on the course's kernel, as `make lab` opens it (the toolbar and status bar name it)
            expect(page.locator("body")).to_contain_text(DISPLAY_NAME, timeout=60_000)
            page.locator(".jp-Notebook").first.click()
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

            # The panel appears when the last cell has run (every chapter cell before it too).
            slider = page.locator(".widget-slider", has_text="replicas").first
            _wait_for_panel(page, slider, served.parent / "lab.log")
            tracebacks = page.locator(STDERR, has_text="Traceback")
            # no cell fails
            texts = tracebacks.all_inner_texts()
            assert texts == [], texts
            before = _trace_count(page)

            readout = slider.locator(".widget-readout")
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("2")
            page.keyboard.press("Enter")
            page.locator("button.jupyter-button").filter(
                has_text=re.compile(r"^\s*Run\s*$")).click()

            # The run trains the chapter's program at 2 replicas (the notebook's run_training):
            # its lines appear, labelled with the replica count, and no error shows in the panel.
            page.wait_for_function(
                "n => document.querySelectorAll('.jp-OutputArea-output .widget-vbox "
                ".js-plotly-plot')[0].querySelectorAll('g.trace').length > n", arg=before,
                timeout=300_000)
            after = _trace_count(page)
            chart = page.locator(".jp-OutputArea-output .widget-vbox .js-plotly-plot").first
            expect(chart).to_contain_text("2 replica(s), batch 32", timeout=60_000)
            assert page.locator(".widget-html", has_text="Cannot run").count() == 0
            page.locator(".jp-OutputArea-output .widget-vbox .js-plotly-plot").first \
                .scroll_into_view_if_needed()
            shot = ARTIFACTS / "chapter05_panel.png"
        finally:
            page.screenshot(path=str(shot), full_page=False)
            browser.close()
    assert after == before + 3  # loss by epoch, loss by examples, test accuracy: one line each
