"""Chapter 10 · Which strategy: fair set-ups, a straggler's price, a choice backed by numbers.

The rules taught: one update of one worker's batch gets ``learning_rate``; a synchronous update
averages N workers' batches and gets N × ``learning_rate`` (the linear scaling rule), and there are
N times fewer of them at equal examples. A straggler changes when a synchronous step ends, never
what it computes, and every step waits for it: an epoch takes at least steps × delay (q10.1
predicts it, q10.2 observes it on real replicas). q10.3 is a trade-off: three situations, per-step
costs measured on a cluster, and the strategy each situation calls for, backed by seconds per
epoch. q10.4 (for chapter 10's second part, 10b_model_parallelism) predicts what each device
holds when DTensor splits a kernel on a 2 × 2 mesh (chapter 10b's had one dimension), then
observes it.
q10.5 asks for TensorFlow: a custom loop under ``tf.distribute.MirroredStrategy`` whose update is
one device's at the same global batch, whatever the number of replicas; it runs on hidden inputs
and is judged against plain SGD on the whole global batch, computed here with numpy.
"""

from __future__ import annotations

import numpy as np

from ..checks import Function, Wrong, close, integers, number, question, short

# q10.1 and q10.2: 2 workers, one worker's batch 32 at rate 0.2, one epoch of 640 examples;
# MirroredStrategy on 2 replicas with replica 1 0.05 s late (mt.straggle) with every gradient.
WORKERS, BATCH, RATE, EXAMPLES, DELAY = 2, 32, 0.2, 640, 0.05
STEPS = EXAMPLES // (WORKERS * BATCH)  # synchronous updates in the one epoch
PREDICTION = {"learning_rate": WORKERS * RATE, "updates": STEPS, "same_weights": True,
              "min_seconds_per_epoch": STEPS * DELAY}


@question("q10.1", "10_which_strategy",
          "predict MirroredStrategy's learning rate, updates, same_weights and least seconds per "
          "epoch with the straggler (dict)",
          right="0.4 (2 × 0.2: a synchronous update averages 2 × 32 examples), 10 updates of 64, the "
                "same weights as without the straggler, and at least 10 × 0.05 = 0.5 s per epoch: "
                "every step waits for the straggler's gradient.")
def _q10_1(answer):
    if not isinstance(answer, dict) or sorted(answer) != sorted(PREDICTION):
        return f"give a dict with the keys {sorted(PREDICTION)}; got {short(answer)}."
    rate = number(answer["learning_rate"], "learning_rate")
    if not close(rate, PREDICTION["learning_rate"]):
        if close(rate, RATE):
            return ("learning_rate 0.2 is one worker's rate; a synchronous update averages the "
                    "gradients of 2 × 32 examples, so the linear scaling rule gives it 2 × 0.2.")
        return f"learning_rate {short(rate)}: apply the linear scaling rule to 0.2 for 2 workers."
    updates = number(answer["updates"], "updates")
    if updates != STEPS:
        if updates == EXAMPLES // BATCH:
            return ("20 would be updates of 32; a synchronous update takes the global batch of "
                    "2 × 32 = 64 examples, so 640 examples make 10 updates.")
        return f"updates {short(updates)}: how many global batches of 64 are in 640 examples?"
    if answer["same_weights"] is not True:
        return ("same_weights: a straggler only waits; every replica's gradient is the same as "
                "without it, and so is their sum and the update. Predict True.")
    seconds = number(answer["min_seconds_per_epoch"], "min_seconds_per_epoch")
    if close(seconds, STEPS * DELAY / WORKERS):
        return ("that is as if only half the steps waited; a synchronous step cannot end before "
                "every replica's gradient is in, so all 10 steps wait 0.05 s.")
    if not close(seconds, PREDICTION["min_seconds_per_epoch"]):
        return (f"min_seconds_per_epoch {short(seconds)}: every one of the epoch's steps waits at "
                f"least the delay.")
    return None


OBSERVED = ("the weights were bit for bit the same, and an epoch took at least the 0.5 s the "
            "straggler forces (a little more: each step also computes and all-reduces).")


@question("q10.2", "10_which_strategy", "run it: pass (same_weights, seconds_per_epoch) observed "
          "with the straggler", right=OBSERVED, parts="(same_weights, seconds_per_epoch)")
def _q10_2(same, seconds):
    if same is not True:
        return ("same_weights should be what np.array_equal says for every weight of the two runs "
                "(it is True: a straggler changes when a step ends, not what it computes).")
    seconds = number(seconds, "seconds_per_epoch")
    least = PREDICTION["min_seconds_per_epoch"]
    if seconds < 0.9 * least:
        return (f"{short(seconds)} s per epoch is less than the {least:g} s the straggler forces: "
                "use the straggler run's step times, not the run without it.")
    if seconds > least + STEPS * 0.2:
        return (f"{short(seconds)} s per epoch is far above {least:g} s; pass the straggler run's "
                "10 steps × its median step time, for the epoch of 640 examples.")
    return None


# q10.3: per-update costs measured on a cluster of 3 workers; an epoch is 14 synchronous steps of
# 3 × 32, or 42 asynchronous updates of 32.
SYNC_STEPS, ASYNC_UPDATES, NODES = 14, 42, 3
MS = {"MirroredStrategy": 4.0, "MultiWorkerMirroredStrategy": 10.0,
      "ParameterServerStrategy": 18.0}  # ms per update as one worker sees it (a ps worker's cycle)
LATE = 100.0  # ms the straggler adds to every gradient in situation c
SITUATIONS = {"a": "one machine, three equal GPUs", "b": "three equal machines",
              "c": "three machines, one 100 ms late with every gradient"}


def epoch_seconds() -> dict[str, dict[str, float]]:
    """Seconds per epoch of each strategy a situation allows (Mirrored: one machine only)."""
    sync = lambda ms: SYNC_STEPS * ms / 1000  # noqa: E731: every step waits for the slowest
    ps = lambda cycles: ASYNC_UPDATES / sum(1000 / c for c in cycles)  # noqa: E731: updates/s add up
    cycle = MS["ParameterServerStrategy"]
    return {
        "a": {"MirroredStrategy": sync(MS["MirroredStrategy"]),
              "MultiWorkerMirroredStrategy": sync(MS["MultiWorkerMirroredStrategy"]),
              "ParameterServerStrategy": ps([cycle] * NODES)},
        "b": {"MultiWorkerMirroredStrategy": sync(MS["MultiWorkerMirroredStrategy"]),
              "ParameterServerStrategy": ps([cycle] * NODES)},
        "c": {"MultiWorkerMirroredStrategy": sync(MS["MultiWorkerMirroredStrategy"] + LATE),
              "ParameterServerStrategy": ps([cycle] * (NODES - 1) + [cycle + LATE])},
    }


@question("q10.3", "10_which_strategy",
          "for situations a, b, c: seconds per epoch of every strategy it allows, and the choice; "
          "pass (seconds, choices)",
          parts="(seconds, choices)",
          right="a: MirroredStrategy (0.056 s per epoch, no RPC in a step); b: "
                "MultiWorkerMirroredStrategy (0.14 s against the parameter server's 0.252 s); c: "
                "ParameterServerStrategy (0.351 s: the two fast workers keep going, while every "
                "synchronous step waits 100 ms, 1.54 s).")
def _q10_3(seconds, choices):
    want = epoch_seconds()
    if not isinstance(seconds, dict) or sorted(seconds) != sorted(want):
        return f"seconds should be a dict with the situations {sorted(want)}; got {short(seconds)}."
    for situation, table in want.items():
        got = seconds[situation]
        if not isinstance(got, dict) or sorted(got) != sorted(table):
            return (f"seconds[{situation!r}] should give a number for each strategy situation "
                    f"{situation} allows, {sorted(table)} (MirroredStrategy runs on one machine "
                    f"only); got {short(got)}.")
        for strategy, value in table.items():
            mine = number(got[strategy], f"seconds[{situation!r}][{strategy!r}]")
            if close(mine, value):
                continue
            if situation == "c" and strategy != "ParameterServerStrategy" and \
                    close(mine, want["b"][strategy]):
                return ("in c every synchronous step waits for the straggler's gradient: add its "
                        "100 ms to each of the 14 steps.")
            if strategy == "ParameterServerStrategy" and situation == "c" and \
                    close(mine, ASYNC_UPDATES / (NODES * 1000 / (MS[strategy] + LATE))):
                return ("in c only one worker is slow: the two others keep their 18 ms cycle, and "
                        "the workers' updates per second add up.")
            if strategy == "ParameterServerStrategy" and close(mine, ASYNC_UPDATES * MS[strategy] / 1000):
                return ("42 updates at 18 ms each is one worker's pace; three workers apply updates "
                        "side by side, so their updates per second add up.")
            return (f"seconds[{situation!r}][{strategy!r}] is {short(mine)}; an epoch is "
                    f"{SYNC_STEPS} synchronous steps, or {ASYNC_UPDATES} updates shared by the "
                    f"workers.")
    best = {s: min(table, key=table.get) for s, table in want.items()}
    if not isinstance(choices, dict) or sorted(choices) != sorted(best):
        return f"choices should name a strategy for each of {sorted(best)}; got {short(choices)}."
    for situation, strategy in best.items():
        if choices[situation] != strategy:
            return (f"for {situation} ({SITUATIONS[situation]}) you chose "
                    f"{short(choices[situation])}; your own seconds say which is fastest.")
    return None


# q10.4: a (128, 64) kernel on a 2 × 2 mesh [("batch", 2), ("model", 2)], Layout([UNSHARDED,
# "model"]): the columns split along "model", the rows whole, repeated along "batch" (the mesh
# dimension the layout does not name; the `Layout` docstring, tensorflow/dtensor/python/layout.py).
KERNEL, MESH = (128, 64), {"batch": 2, "model": 2}
DEVICES = MESH["batch"] * MESH["model"]
PART = [KERNEL[0], KERNEL[1] // MESH["model"]]  # what each device holds


@question("q10.4", "10b_model_parallelism",
          "predict, then observe, the shape each of 4 devices holds of a (128, 64) kernel on a "
          "2 × 2 mesh ('batch', 'model') with Layout([UNSHARDED, 'model']); pass (predicted, "
          "observed)",
          parts="(predicted, observed)",
          right="(128, 32) on each device: the columns are split along 'model' (2 devices), the "
                "rows kept whole, and along 'batch', which the layout does not name, each half "
                "is repeated (the Layout docstring, tensorflow/dtensor/python/layout.py).")
def _q10_4(predicted, observed):
    for what, shapes in (("predicted", predicted), ("observed", observed)):
        if not isinstance(shapes, list) or len(shapes) != DEVICES:
            return f"{what} should list one shape per device (4); got {short(shapes)}."
        got = [integers(s, f"{what} shape") for s in shapes]
        if any(g != PART for g in got):
            if any(g == [KERNEL[0], KERNEL[1] // DEVICES] for g in got):
                return (f"{what}: (128, 16) cuts the columns into 4, one part per device; the "
                        "layout splits them along 'model' only, which has 2 devices, and repeats "
                        "each part along 'batch', the mesh dimension it does not name.")
            if any(g == [KERNEL[0] // MESH["batch"], KERNEL[1] // MESH["model"]] for g in got):
                return (f"{what}: (64, 32) also splits the rows along 'batch'; the layout says "
                        "UNSHARDED (kept whole) for the rows.")
            if any(g[0] != KERNEL[0] and g[1] == KERNEL[1] for g in got):
                return (f"{what}: that splits the rows; the layout names 'model' for the "
                        "columns, and UNSHARDED (kept whole) for the rows.")
            return (f"{what} is {short(got)}; a dimension split along a mesh dimension is cut "
                    "into as many equal parts as that mesh dimension has devices, an UNSHARDED "
                    "one stays whole.")
    return None


# q10.5: train_on(replicas, global_batch, rate): one pass over the 64 examples below in global
# batches (in order, no partial batch), a Dense(1) layer without bias starting at zero, SGD on the
# mean over the global batch of (y - prediction)², under MirroredStrategy on `replicas` devices.
FEATURES = 4
TRUE_W = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)
STEP_CASES = ((1, 16, 0.05), (2, 16, 0.05), (4, 32, 0.05))


def linear_data() -> tuple[np.ndarray, np.ndarray]:
    """The exercise's 64 examples: x normal (seed 0), y = x · (1, −2, 3, 0.5)."""
    x = np.random.default_rng(0).normal(size=(64, FEATURES)).astype(np.float32)
    return x, (x @ TRUE_W)[:, None]


def sgd_weights(global_batch: int, rate: float, scale: float = 1.0) -> np.ndarray:
    """Plain SGD on the whole global batch, one device, in float64: what every replica count must
    reach. ``scale`` multiplies each gradient (the judge's model of a wrong divisor)."""
    x, y = (a.astype(np.float64) for a in linear_data())
    w = np.zeros((FEATURES, 1))
    for start in range(0, len(x) - global_batch + 1, global_batch):
        xb, yb = x[start:start + global_batch], y[start:start + global_batch]
        w -= rate * scale * 2.0 / global_batch * xb.T @ (xb @ w - yb)
    return w[:, 0]


def read_weights(result, shown: str) -> np.ndarray:
    """The 4 final weights the student's function returned (model.get_weights() or the kernel)."""
    try:
        values = np.asarray(result[0] if isinstance(result, list) and len(result) == 1
                            else result, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        values = np.full(0, np.nan)
    if values.shape != (FEATURES,) or not np.all(np.isfinite(values)):
        raise Wrong(f"{shown} should return the layer's 4 weights (model.get_weights()); "
                    f"got {short(result)}")
    return values


@question("q10.5", "10_which_strategy",
          "write train_on(replicas, global_batch, rate): one pass of a custom loop under "
          "tf.distribute.MirroredStrategy, returning model.get_weights()",
          right="your loop reaches the weights of plain SGD on the whole global batch for every "
                "number of replicas: each replica's loss divided by the global batch, the gradients "
                "summed by the all-reduce.",
          kind=Function("train_on", STEP_CASES))
def _q10_5(calls):
    for (replicas, batch, rate), result in calls:
        shown = calls.shown([replicas, batch, rate])
        try:
            got = read_weights(result, shown)
        except Wrong as exc:
            return f"{exc}."
        want = sgd_weights(batch, rate)
        if np.allclose(got, want, rtol=1e-4, atol=1e-5):
            continue
        if replicas > 1 and np.allclose(got, sgd_weights(batch, rate, scale=replicas),
                                        rtol=1e-4, atol=1e-5):
            return (f"{shown}: each replica divided its loss by its own {batch // replicas} "
                    f"examples, so the all-reduce summed {replicas} means: {replicas}× the "
                    f"gradient. Divide by the global batch: tf.nn.compute_average_loss(per_example, "
                    f"global_batch_size={batch}).")
        if np.allclose(got, sgd_weights(batch, rate, scale=0.5), rtol=1e-4, atol=1e-5):
            return (f"{shown}: half the expected step: the loss is the mean of (y − prediction)², "
                    "not half of it.")
        return (f"{shown} returned {np.round(got, 4).tolist()}; plain SGD on the whole global batch "
                f"reaches {np.round(want, 4).tolist()}.")
    return None
