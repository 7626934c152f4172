"""The scaling experiments that chapter 5 ran before its training became a program of its own
(programs/05_scaling.py; the panel is tested with it in tests/programs/test_scaling_program.py)."""

from __future__ import annotations

import pytest

import mirrortutor as mt
from mirrortutor.training import scaling as experiments

FAST = dict(epochs=2, width=32, depth=1)


@pytest.fixture(scope="module")
def sweep_results(devices):
    """One sweep over 1, 2, 4 and 8 replicas (shared by the tests below: it takes seconds)."""
    return mt.experiments.sweep((1, 2, 4, 8), devices=devices, **FAST)


def test_sweep_gives_a_result_per_replica_count(sweep_results):
    """Each run trained at its replica count, with the global batch = per-replica batch × replicas."""
    assert [r.config.replicas for r in sweep_results] == [1, 2, 4, 8]
    for r in sweep_results:
        assert r.global_batch == 16 * r.config.replicas
        assert r.steps_per_epoch == 1437 // r.global_batch  # the digits' training 80 %
        assert [e.epoch for e in r.epochs] == [1, 2]
        assert r.epochs[-1].loss < r.epochs[0].loss  # it learned
        assert r.epochs[-1].examples_seen == 2 * r.steps_per_epoch * r.global_batch
        assert r.device_kind == "logical CPU"
        t = r.timing
        assert t.total_s > 0 and t.allreduce_s > 0 and t.input_s > 0 and t.compute_s > 0
        assert r.throughput == pytest.approx(r.global_batch / t.total_s)
        # nothing is defined as a remainder: the rest is what the measured parts leave
        waited = 0.0 if t.prefetch else t.input_s
        assert t.rest_s == pytest.approx(t.total_s - t.compute_s - t.allreduce_s - waited)


def test_linear_scaling_rule_multiplies_the_learning_rate(sweep_results, devices):
    """linear rules reach k × base_lr at k replicas; fixed keeps base_lr; warm-up starts low."""
    assert [r.peak_learning_rate for r in sweep_results] == [0.05, 0.1, 0.2, 0.4]
    fixed = mt.experiments.run_scaling(replicas=4, lr_rule="fixed", devices=devices, **FAST)
    assert fixed.peak_learning_rate == 0.05 and fixed.epochs[-1].learning_rate == pytest.approx(0.05)
    warm = mt.experiments.run_scaling(replicas=4, lr_rule="linear_warmup", warmup_epochs=4,
                                      devices=devices, **FAST)
    # halfway through a 4-epoch warm-up: between base and peak
    assert 0.05 < warm.epochs[0].learning_rate < warm.epochs[1].learning_rate < 0.2


def test_modelled_throughput_follows_the_stated_models(sweep_results):
    """The modelled step is the GPU model's compute (no CPU timing) plus the α–β all-reduce of
    the preset, so the same config gives the same model in every run, and efficiency ≤ 1."""
    gpu = mt.costmodel.gpu("a100-fp32")
    for r in sweep_results:
        assert r.modelled_compute_s == gpu.step_seconds(r.num_parameters, 16)
        est = mt.costmodel.estimate_step(r.num_parameters, r.modelled_compute_s, r.config.replicas,
                                         "nvlink3-a100")
        assert r.modelled_step_s == est.step_s
        assert r.modelled_throughput == pytest.approx(r.global_batch / est.step_s)
        assert "datasheet" in r.gpu_source and r.interconnect_source
    rows = mt.experiments.efficiency_table(sweep_results)
    assert rows[0]["measured_efficiency"] == 1.0 and rows[0]["modelled_efficiency"] == 1.0
    effs = [r["modelled_efficiency"] for r in rows]
    assert all(0 < e <= 1.0 for e in effs) and effs == sorted(effs, reverse=True)
    assert all(r["modelled_throughput"] <= r["replicas"] * rows[0]["modelled_throughput"]
               for r in rows)


def test_learning_curve_runs_can_skip_timing(devices):
    """timing=False trains and models the GPU line, but measures no step breakdown."""
    r = mt.experiments.run_scaling(replicas=2, timing=False, devices=devices, **FAST)
    assert r.timing is None and r.throughput > 0 and 0 < r.modelled_efficiency <= 1
    assert len(r.epochs) == 2


@pytest.mark.parametrize("bad, error", [
    (dict(replicas=9), mt.ReplicaCountError),
    (dict(replicas=0), mt.ReplicaCountError),
    (dict(epochs=0), mt.errors.ScalingConfigError),
    (dict(epochs=True), mt.errors.ScalingConfigError),
    (dict(lr_rule="cubic"), mt.errors.ScalingConfigError),
    (dict(cross_device_ops="nccl-please"), mt.errors.ScalingConfigError),
    (dict(cross_device_ops="auto"), mt.errors.ScalingConfigError),
    (dict(interconnect="carrier-pigeon"), mt.errors.UnknownPresetError),
])
def test_bad_settings_are_rejected_with_a_message(devices, bad, error):
    """Impossible settings raise a clear error before any training starts."""
    with pytest.raises(error):
        mt.experiments.run_scaling(devices=devices, **{**FAST, **bad})


def test_a_global_batch_that_does_not_split_is_rejected():
    """A global batch that Keras fit cannot split evenly raises BatchSplitError with a fix."""
    with pytest.raises(mt.BatchSplitError, match="multiple of 8"):
        mt.experiments.config_for_global_batch(100, replicas=8)


def test_runs_and_measurements_share_one_vocabulary_of_implementations():
    """A scaling run asks for TF's cross-device implementations by the names mt.measure uses."""
    assert set(mt.experiments.CROSS_DEVICE_OPS) <= set(mt.measure.IMPLEMENTATIONS)
    assert mt.experiments.ScalingConfig().cross_device_ops == "default"


def test_efficiency_without_a_one_replica_run_is_a_mirrortutor_error():
    """efficiency_table needs its baseline; without it, a plain ScalingConfigError says so."""
    with pytest.raises(mt.errors.ScalingConfigError, match="replicas=1"):
        mt.experiments.efficiency_table([])


def test_a_sweep_shows_progress_to_its_end(sweep_results):
    """The sweep's bar and each run's epoch bar reached their ends (progress on every long call)."""
    from mirrortutor.progress import FINISHED

    sweeps = [f for f in FINISHED if f.description == "scaling sweep"]
    epochs = [f for f in FINISHED if f.description.startswith("training ")]
    assert sweeps and sweeps[-1].done == sweeps[-1].total == 4
    assert epochs and all(f.done == f.total == 2 for f in epochs[-4:])
