"""Every conclusion a chapter draws is checked by its data: claim cells stay where they are.

A claim cell is a code cell tagged ``claim`` whose metadata names it
(``{"mirrortutor": {"claim": "05-fixed-rate-falls-behind"}}``) and which calls ``mt.claim``. nbval
runs it, so a conclusion the data stops supporting fails CI. The list below is what each chapter
claims: removing a claim cell, or adding one without listing it here, fails this test, and so does
a chapter whose "What you learned" comes before any claim.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

#: notebook stem -> the ids of its claim cells, in order.
CLAIMS: dict[str, list[str]] = {
    "00_welcome": [
        "00-eight-logical-devices",
        "00-setup-again-is-harmless",
        "00-one-value-per-device",
        "00-reduce-sum-and-mean",
    ],
    "01_mirrored_variable": [
        "01-contexts",
        "01-none-each-writes-its-own",
        "01-aggregations-as-the-table-says",
        "01-assign-add-combines-increments",
        "01-tf-test-case",
        "01-assignments-use-reduction-to-one",
        "01-only-none-drifts",
        "01-on-read-cross-replica-write",
        "01-on-read-sum-cross-replica-add-raises",
        "01-keras-metric-on-read-sum",
    ],
    "02_replicas_and_shards": [
        "02-contiguous-shards",
        "02-uneven-last-batch",
        "02-each-example-once",
        "02-split-depends-on-policy",
        "02-short-batch-joins-the-next-under-off",
        "02-axis-none-vs-axis-0",
        "02-plain-tf-addn-error",
        "02-fit-fails-on-uneven-first-batch",
        "02-fit-needs-even-first-batch",
        "02-other-count-fails-after-a-collective",
        "02-other-shape-fails-on-same-devices",
        "02-validation-needs-even-first-batch",
    ],
    "03_gradients_allreduce": [
        "03-allreduce-equals-one-device",
        "03-scale-is-one",
        "03-scale-is-n",
        "03-keras-default-loss-scales",
        "03-replicas-stay-identical",
        "03-fit-same-gradients",
        "03-fit-outside-reductions",
        "03-plain-tf-assertion-error",
        "03-double-reduce-n-times",
        "03-clipnorm-per-replica",
    ],
    "04_allreduce_algorithms": [
        "04-reduce-to-one-root-bottleneck",
        "04-ring-below-2S",
        "04-halving-doubling-vs-ring-modelled",
        "04-resnet50-interconnects-modelled",
        "04-ring-share-levels-off",
        "04-keras-step-one-pack",
    ],
    "04b_allreduce_in_tensorflow": [
        "04-what-tf-runs",
        "04-reduce-to-vs-batch-reduce",
        "04-int32-batch-refused",
        "04-chosen-ops-keep-int32-rule",
        "04-hierarchical-copy-drops-a-replica",
        "04-chosen-ops-keep-cpu-destinations",
        "04-nccl-needs-gpus",
        "04-reduce-to-one-faster-here",
        "04-latency-here-vs-nvlink",
    ],
    "05_scaling_experiments": [
        "05-fixed-rate-falls-behind",
        "05-linear-rule-recovers-warmup-does-not-help",
        "05-more-replicas-slower-here",
        "05-modelled-overhead-and-latency",
        "05-keras-accumulation-fails",
        "05-accumulation-fewer-allreduces",
    ],
    "06_parameter_servers": [
        "06-copies-stay-equal",
        "06-placement",
        "06-dataset-fn-traced-with-its-data",
        "06-first-loss-is-ln10",
        "06-workers-read-the-same-batches",
    ],
    "06b_async_training": [
        "06-every-step-logged-once",
        "06-each-worker-its-own-shuffle",
        "06-both-runs-learn",
        "06-some-updates-stale",
        "06-one-op-counter-counts-all",
    ],
    "07_stale_gradients": [
        "07-straggler-same-weights",
        "07-straggler-holds-sync",
        "07-failed-step-moves-counter",
        "07-checkpoint-exact",
        "07-each-step-logged-once",
        "07-estimate-overshoots-at-low-load",
        "07-staleness-from-in-flight",
        "07-straggler-fewest-steps",
        "07-straggler-staler",
        "07-straggler-staleness-size",
    ],
    "07b_sync_vs_async": [
        "07-fewer-larger-steps-cost",
        "07-scaling-rule-helps",
        "07-async-below-sync",
        "07-straggler-costs-sync-more",
        "07-kill-each-step-once",
        "07-restarted-worker-rejoins",
    ],
    "08_multi_worker": [
        "08-data-sharding",
        "08-cross-worker-sum",
        "08-no-drift",
        "08-same-as-one-machine",
        "08-nccl-on-cpu",
        "08-off-cut-rotated",
        "08-off-duplicates",
        "08-file-sharding",
        "08-file-needs-files",
    ],
    "08b_checkpoints_and_failures": [
        "08-checkpoint-on-write",
        "08-chief-checkpoints",
        "08-one-death-stops-all",
        "08-resume-same-weights",
        "08-fit-fails-as-in-tf",
    ],
    "10_which_strategy": [
        "10-sync-same-as-one-device",
        "10-sync-straggler-same-numbers",
        "10-multiworker-same-as-mirrored",
        "10-same-examples-fair-rates",
        "10-batch-96-same-losses",
        "10-linear-scaling-costs-examples",
        "10-rpc-in-every-step",
        "10-mirrored-fastest-here",
        "10-straggler-ps-wins",
        "10-straggler-gradients-stale",
    ],
    "10b_model_parallelism": [
        "10-split-model-same-as-whole",
    ],
    "09_is_it_effective": [
        "09-phases-tile-each-step",
        "09-timeline-matches-host-clock",
        "09-slow-read-is-input-bound",
        "09-cached-is-compute-bound",
        "09-distribute-prefetches",
        "09-eager-is-slower",
    ],
    "09b_communication_and_stragglers": [
        "09-allreduce-grows-with-width",
        "09-bigger-batch-smaller-share",
        "09-modelled-pcie-dominates-first",
        "09-modelled-batch-and-overlap",
        "09-straggler-holds-the-step",
        "09-straggler-same-weights",
        "09-accumulation-same-update",
        "09-accumulation-still-waits",
        "09-diagnose-names-each-cause",
    ],
}


def claim_cells(nb) -> list[tuple[int, nbformat.NotebookNode]]:
    return [(i, c) for i, c in enumerate(nb.cells) if "claim" in c.metadata.get("tags", [])]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_claim_cells_are_the_listed_ones(path):
    """The notebook's claim cells are exactly those listed in CLAIMS, in order."""
    nb = nbformat.read(path, as_version=4)
    found = [c.metadata.get("mirrortutor", {}).get("claim") for _, c in claim_cells(nb)]
    assert found == CLAIMS.get(path.stem, []), f"{path.name}: claim cells {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_what_you_learned_follows_a_claim(path):
    """A chapter's conclusions come after at least one claim cell checked them."""
    nb = nbformat.read(path, as_version=4)
    learned = next(i for i, c in enumerate(nb.cells)
                   if c.cell_type == "markdown" and "What you learned" in c.source)
    assert any(i < learned for i, _ in claim_cells(nb)), f"{path.name}: no claim before it"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_claim_cells_check_with_mt_claim_and_are_run(path):
    """Each claim cell is code that calls mt.claim (it raises in plain words), and nbval runs it."""
    nb = nbformat.read(path, as_version=4)
    for _, cell in claim_cells(nb):
        assert cell.cell_type == "code" and "mt.claim(" in cell.source, cell.source
        assert "NBVAL_SKIP" not in cell.source and "raises-exception" not in \
            cell.metadata.get("tags", []), cell.source
