"""Progress bars: every long call shows one, it reaches its end, and nbval never compares it."""

from __future__ import annotations

import re
from pathlib import Path

from nbval.plugin import get_sanitize_patterns

from mirrortutor.progress import FINISHED, progress, static_text

SANITIZE = Path(__file__).resolve().parents[2] / "mirrortutor" / "grading" / "nbval_sanitize.cfg"


def test_a_bar_notes_how_far_it_got_when_it_closes():
    """A closed bar is noted in FINISHED with its description, count and total."""
    with progress(3, "three things", unit="thing") as bar:
        for _ in range(3):
            bar.update(1)
    assert FINISHED[-1].description == "three things"
    assert FINISHED[-1].done == FINISHED[-1].total == 3


def test_a_disabled_bar_shows_nothing_and_notes_nothing():
    """show_progress=False callers (a panel with its own bar) get no bar and no note."""
    before = len(FINISHED)
    with progress(2, "hidden", disable=True) as bar:
        bar.update(2)
    assert len(FINISHED) == before


def test_the_sanitiser_hides_a_bars_counts_and_rates_but_keeps_its_words():
    """nbval compares bars as 'PROGRESS <what>', so changing counts and timings never fail it."""
    patterns = get_sanitize_patterns(SANITIZE.read_text(encoding="utf-8"))  # nbval's own reading
    rx, repl = next((r, p) for r, p in patterns if p.startswith("PROGRESS"))
    for shown in ("scaling sweep:   0%|          | 0/4 [00:00<?, ?run/s]",
                  "scaling sweep:  75%|███████▌  | 3/4 [00:09<00:03,  3.1s/run, replicas=8]"):
        assert re.sub(rx, repl, shown) == "PROGRESS scaling sweep"
    assert re.sub(rx, repl, "loss by epoch: [1.88, 1.08]") == "loss by epoch: [1.88, 1.08]"


def test_a_panel_keeps_the_live_view_and_stores_readable_text():
    """Panel's bundle has the widget's view (live in JupyterLab) and our text as text/plain."""
    import ipywidgets as W

    from mirrortutor.panel import Panel

    slider = W.IntSlider()
    bundle = Panel(W.VBox([slider]), "a slider: run the notebook to use it")._repr_mimebundle_()
    assert bundle["text/plain"] == "a slider: run the notebook to use it"
    assert "VBox(" in W.VBox([slider])._repr_mimebundle_()["text/plain"]  # what it replaces
    assert "model_id" in bundle["application/vnd.jupyter.widget-view+json"]


def test_a_bars_stored_text_names_it_and_holds_no_count():
    """A notebook bar's fallback says what it counted and holds no count or rate to freeze."""
    text = static_text("training 8 replica(s)")
    assert text.startswith("training 8 replica(s): ") and not re.search(r"\d+%|\d+/\d+", text)
