"""How much does recording cost? Plain tf.distribute.MirroredStrategy vs mt.MirroredStrategy.

Trains the same small MLP on the digits with a custom loop on 4 logical CPU replicas, alternating
plain / default recording / full recording runs (their order rotating from round to round), and
prints the median step time of each and its ratio to plain. The ratio is the median of per-round
ratios (each round runs every variant back to back), with their interquartile range (how much one
round varies) and a 95 % bootstrap interval for the median itself (how sure the figure is: 2,000
resamples of the rounds, seeded): on a shared machine whose speed drifts, pairing runs that close
together is what keeps the ratio honest, and many short rounds are what make it precise. Then
runs 1,000 and 10,000 steps with default recording and prints the trace's memory, which must stay
bounded (the default keeps the first steps and a fixed-size sample).

Timings are from logical CPU devices sharing this machine's cores: they measure recording's
overhead here, not GPU speed. Usage: python benchmarks/instrumentation_overhead.py [--quick]
"""

from __future__ import annotations

import random
import statistics
import sys
import time

import mirrortutor as mt

DEVICES = mt.setup(4)

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from mirrortutor.record.tf_internals.hooks import plain_mirrored_strategy  # noqa: E402

QUICK = "--quick" in sys.argv
STEPS = 50  # timed steps per run (default recording keeps 1 of every 50)
ROUNDS = 3 if QUICK else 60  # runs per variant, alternating
GLOBAL_BATCH = 64


def plain_strategy():
    return plain_mirrored_strategy(DEVICES)


def make_trainer(strategy):
    """A compiled train step over an endless distributed digits dataset."""
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    data = mt.data.digits().to_tf(GLOBAL_BATCH, drop_remainder=True).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(data))

    @tf.function
    def step():
        def replica(index, x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                                  global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(replica, args=next(iterator)), axis=None)

    step()  # trace and warm up
    return step


def time_run(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.numpy()
    return (time.perf_counter() - start) / steps


def median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval for the median of ``values`` (seeded, so the same
    rounds give the same interval)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def main() -> None:
    variants = {
        "plain tf.distribute": make_trainer(plain_strategy()),
        "mt, default recording": make_trainer(mt.MirroredStrategy(DEVICES)),
        "mt, full recording": make_trainer(mt.MirroredStrategy(DEVICES,
                                                               recording=mt.Recording.everything())),
    }
    times = {name: [] for name in variants}
    names = list(variants)
    for r in range(ROUNDS):  # alternate, so drifts in machine load hit every variant alike,
        for name in names[r % 3:] + names[:r % 3]:  # and rotate: none always runs first
            times[name].append(time_run(variants[name], STEPS))
    plain = times["plain tf.distribute"]
    print(f"4 logical CPU replicas on shared cores; {ROUNDS} alternating runs of {STEPS} steps")
    print(f"{'variant':24s} {'median step':>12s} {'ratio to plain':>15s} {'(IQR)':>14s} "
          f"{'(95% CI of the median)':>23s}")
    for name, ts in times.items():
        ratios = sorted(t / p for t, p in zip(ts, plain))
        q1, q3 = statistics.quantiles(ratios, n=4)[::2] if len(ratios) > 1 else ratios * 2
        low, high = median_interval(ratios)
        print(f"{name:24s} {statistics.median(ts) * 1e3:9.2f} ms "
              f"{statistics.median(ratios):14.3f}x {q1:6.3f}-{q3:.3f} {low:14.3f}-{high:.3f}")

    print("\ntrace memory with default recording (must stay bounded):")
    strategy = mt.MirroredStrategy(DEVICES)
    step = make_trainer(strategy)
    done = 1
    for target in ([200, 1000] if QUICK else [1000, 10000]):
        for _ in range(target - done):
            step()
        done = target
        print(f"after {strategy.trace.steps_run:6d} steps: {len(strategy.trace.steps):3d} steps kept, "
              f"{strategy.trace.nbytes() / 1e6:6.2f} MB")


if __name__ == "__main__":
    main()
