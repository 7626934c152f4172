"""Chapter 05's program (programs/05_scaling.py) and the panel that runs the notebook's training
function: the learning-rate rules the program writes out, and what the panel does with a run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mirrortutor as mt

PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "05_scaling.py"


def run_training(replicas, lr_rule="linear", base_lr=0.05, per_replica_batch=16, epochs=1,
                 data=""):
    """What chapter 05's notebook defines: one run of the program, as the charts' dict."""
    mt.new_collective_keys()  # as the notebook: another replica count in this process
    run = mt.run_program(PROGRAM, "--replicas", replicas, "--lr-rule", lr_rule, "--base-lr",
                         base_lr, "--per-replica-batch", per_replica_batch, "--epochs", epochs,
                         *(["--data", data] if data else []))
    g = run.namespace
    return dict(label=f"{replicas} replica(s)", replicas=replicas,
                per_replica_batch=per_replica_batch, global_batch=g["global_batch_size"],
                steps_per_epoch=g["steps_per_epoch"], loss=g["history"].history["loss"],
                test_accuracy=g["test_accuracy"], step_s=float(np.median(g["step_seconds"])),
                parameters=g["model"].count_params(), run=run)


def test_the_program_scales_the_rate_and_warms_up_to_it(devices):
    """linear: base × replicas; warmup: base at step 0, the same rise each step, peak from the end
    of the warm-up on (read off the program's own schedule); fixed: base."""
    linear = run_training(4)["run"].namespace
    assert linear["learning_rate"] == pytest.approx(0.2) and linear["global_batch_size"] == 64
    warm = run_training(4, "warmup", epochs=2)["run"].namespace
    schedule, steps = warm["learning_rate"], warm["steps_per_epoch"]  # --warmup-epochs 1
    rates = [float(schedule(s)) for s in (0, steps // 2, steps, 5 * steps)]
    assert rates[0] == pytest.approx(0.05) and rates[2] == rates[3] == pytest.approx(0.2)
    assert rates[1] == pytest.approx(0.05 + 0.15 * (steps // 2) / steps)
    assert float(warm["model"].optimizer.learning_rate.numpy()) == pytest.approx(0.2)
    assert run_training(4, "fixed")["run"].namespace["learning_rate"] == 0.05


def test_the_panel_runs_the_notebooks_function_then_reports_bad_settings(devices, tmp_path):
    """Run calls the function with the panel's settings and draws its run; a setting the program
    refuses shows the program's message in the panel, which stays usable."""
    tiny = tmp_path / "tiny.npz"
    rng = np.random.default_rng(0)
    np.savez(tiny, x_train=rng.normal(size=(40, 64)).astype("float32"),
             y_train=rng.integers(0, 10, 40), x_test=rng.normal(size=(8, 64)).astype("float32"),
             y_test=rng.integers(0, 10, 8))
    calls = []

    def train(**settings):
        calls.append(settings)
        return run_training(**settings, data=tiny if settings["replicas"] == 8 else "")

    lab = mt.widgets.ScalingLab(train, devices)
    lab.epochs.value, lab.replicas.value, lab.lr_rule.value = 1, 2, "fixed"
    lab.run_button.click()
    assert lab.message.value == "" and len(lab.results) == 1
    assert calls == [dict(replicas=2, per_replica_batch=16, epochs=1, lr_rule="fixed",
                          base_lr=0.05)]
    assert len(lab.loss_chart.data) == 3 and len(lab.scaling_chart.data) == 2
    lab.replicas.value = 8  # 8 × 16 examples: more than the 40 the tiny data set holds
    lab.run_button.click()
    assert "Cannot run" in lab.message.value and "larger than the 40" in lab.message.value
    lab.replicas.value = 4
    lab.run_button.click()  # still usable, and another replica count in the same process works
    assert [r["replicas"] for r in lab.results] == [2, 4] and lab.message.value == ""
    assert len(lab.loss_chart.data) == 6
    assert "not GPU speed" in lab.scaling_chart.layout.annotations[0].text


def test_the_panel_needs_a_training_function():
    with pytest.raises(mt.errors.ScalingConfigError, match="define"):
        mt.widgets.ScalingLab("run_scaling", devices=["/cpu:0"])


def test_the_time_chart_draws_parts_beside_the_step_never_a_remainder():
    """Grouped bars: the step and each part timed alone, as measured (no assumed zero, no
    'rest' that can go negative)."""
    row = dict(label="2 replica(s)", step_s=0.004, compute_s=0.003, allreduce_s=0.002,
               input_s=0.001)
    fig = mt.widgets.time_chart([row])
    assert fig.layout.barmode == "group"
    assert [bar.y[0] for bar in fig.data] == pytest.approx([4.0, 3.0, 2.0, 1.0])
    assert not any("rest" in bar.name or "waited" in bar.name for bar in fig.data)
