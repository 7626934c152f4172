"""Chapter 05 · Scaling experiments: trade-offs, each chosen and defended with the cost model.

The rules taught: more replicas only help while the all-reduce stays small next to the compute,
so compare the estimated speed-ups of :func:`mirrortutor.collectives.costmodel.estimate_step`,
not the replica counts (q5.1; at 120 ms of compute, not chapter 04's 100 ms, so no row of its
table answers it); and a larger per-replica batch makes the all-reduce a smaller share of the
step, but a larger global batch needs the learning rate scaled and may need a warm-up (Goyal et
al. 2017) and can generalise worse (Keskar et al. 2017, "On Large-Batch Training for Deep
Learning: Generalization Gap and Sharp Minima"), so take the smallest batch that scales well
enough (q5.2). Each
answer hands over the student's own estimates (their fields, as data) and the choice; the
judges check that each estimate prices the set-up asked for (the all-reduce after the compute,
``overlap=False``; q5.2's on the ring), and the verdicts quote the cost model's numbers, computed
when this module is imported.

q5.3 asks for Keras code: a ``LearningRateSchedule`` for a stated recipe (the chapter's linear
scaling rule and warm-up, then Goyal et al.'s step decay, which the chapter did not write). It is
judged by running it as Keras runs it: the check hands the student's schedule to a
``keras.optimizers.SGD`` and reads ``optimizer.learning_rate`` inside a ``tf.function`` (as a traced
``fit`` step does) at the steps around every boundary, on public and hidden recipes.
"""

from __future__ import annotations

from ...collectives import costmodel
from dataclasses import dataclass
import inspect

from ..checks import Function, Wrong, close, fmt, question, short, two

SCENARIO = dict(num_parameters=25.6e6, compute_s=0.120)  # ResNet-50-sized, 120 ms per step
OPTIONS = {"A": dict(num_replicas=16, interconnect="eth-10g", algorithm="ring"),
           "B": dict(num_replicas=8, interconnect="pcie3-x16", algorithm="ring"),
           "C": dict(num_replicas=8, interconnect="pcie3-x16", algorithm="reduce_to_one")}
BATCHES = (16, 32, 64, 128)  # q5.2's per-replica batch sizes to choose from
SECONDS_PER_EXAMPLE, TARGET = 0.003, 0.9  # compute per example per GPU; scaling efficiency wanted


def _speedups() -> dict[str, float]:
    return {k: costmodel.estimate_step(SCENARIO["num_parameters"], SCENARIO["compute_s"],
                                       o["num_replicas"], o["interconnect"],
                                       algorithm=o["algorithm"]).speedup
            for k, o in OPTIONS.items()}


def efficiencies() -> dict[int, float]:
    """Scaling efficiency of each batch size in BATCHES on q5.2's machine (the cost model's)."""
    return {b: costmodel.estimate_step(SCENARIO["num_parameters"], SECONDS_PER_EXAMPLE * b, 8,
                                       "pcie3-x16").scaling_efficiency for b in BATCHES}


def _no_overlap(key: str, e: dict) -> None:
    """The questions price a step whose all-reduce starts after the compute (the default)."""
    if e.get("overlap") is not False:
        raise Wrong(f"estimates[{key!r}] was priced with overlap={short(e.get('overlap'))}: the "
                    "all-reduce hidden behind the compute, the best case. Price it as the "
                    "question asks, with estimate_step's default overlap=False (compute, then "
                    "the all-reduce).")


def _estimates(answer, keys, what_each) -> tuple[object, dict]:
    """The (choice, estimates) pair, each estimate the data of an estimate_step result."""
    pick, estimates = two(answer, "(choice, estimates)")
    names = [str(k) for k in keys]
    if not isinstance(estimates, dict) or sorted(estimates) != sorted(names):
        raise Wrong(f"estimates should be a dict with one mt.costmodel.estimate_step(...) result "
                    f"for each of {names}; got {short(estimates)}.")
    for key in names:
        e = estimates[key]
        if not isinstance(e, dict) or e.get("type") != "StepEstimate":
            raise Wrong(f"estimates[{key!r}] is {short(e)}; expected what estimate_step returns "
                        f"for {what_each(key)}.")
    return pick, estimates


@question("q5.1", "05_scaling_experiments",
          "choose the fastest set-up (A, B or C) and back it with estimate_step for each",
          right="B: 8 GPUs on PCIe 3 with the ring, about {B:.1f} times one GPU's throughput, ahead "
                "of A (16 GPUs over 10 GbE, about {A:.1f}x) and C (reduce-to-one, about {C:.1f}x)."
                .format(**_speedups()))
def _q5_1(answer):
    choice, estimates = _estimates(answer, OPTIONS, lambda k: f"option {k}")
    for key, option in OPTIONS.items():
        e = estimates[key]
        _no_overlap(key, e)
        got = {k: e.get(k) for k in option}
        if got != option or not close(e.get("gradient_bytes"), 4 * SCENARIO["num_parameters"]) \
                or not close(e.get("compute_s"), SCENARIO["compute_s"]):
            return (f"estimates[{key!r}] prices {got} with {fmt(e.get('gradient_bytes'))} gradient "
                    f"bytes and {fmt(e.get('compute_s'))} s of compute; option {key} is {option}, with "
                    f"{fmt(SCENARIO['num_parameters'])} float32 parameters and "
                    f"{SCENARIO['compute_s']} s of compute.")
    speedups = _speedups()
    best = max(speedups, key=speedups.get)
    if choice == best:
        return None
    if choice not in OPTIONS:
        return f"choose one of {sorted(OPTIONS)}; got {short(choice)}."
    return (f"{choice} gives about {speedups[choice]:.1f}x, but {best} about {speedups[best]:.1f}x. "
            "More GPUs only help while the all-reduce stays small next to the compute: compare "
            "each estimate's speedup, not its num_replicas.")


@question("q5.2", "05_scaling_experiments",
          "choose the smallest per-replica batch (16, 32, 64, 128) that scales at 90% on 8 GPUs",
          right="64: the smallest per-replica batch whose step scales at 90% or better on 8 GPUs "
                "over PCIe 3 (about {e64:.0%}); 32 reaches only about {e32:.0%}, and 128 doubles "
                "the global batch for little gain.".format(**{f"e{b}": e for b, e in efficiencies().items()}))
def _q5_2(answer):
    choice, estimates = _estimates(answer, BATCHES, lambda b: f"a per-replica batch of {b}")
    for b in BATCHES:
        e = estimates[str(b)]
        _no_overlap(str(b), e)
        if e.get("algorithm") != "ring":
            return (f"estimates['{b}'] prices the all-reduce with {short(e.get('algorithm'))}; this "
                    "machine runs the ring (estimate_step's default, algorithm=\"ring\").")
        if e.get("num_replicas") != 8 or e.get("interconnect") != "pcie3-x16" \
                or not close(e.get("compute_s"), SECONDS_PER_EXAMPLE * b) \
                or not close(e.get("gradient_bytes"), 4 * SCENARIO["num_parameters"]):
            return (f"estimates['{b}'] prices {e.get('num_replicas')} replicas on "
                    f"{e.get('interconnect')} with {fmt(e.get('compute_s'))} s of compute; a batch "
                    f"of {b} on 8 GPUs over pcie3-x16 computes for {SECONDS_PER_EXAMPLE} × {b} s.")
    efficiency = efficiencies()
    if isinstance(choice, str) and choice.strip().isdigit():
        choice = int(choice)
    best = min(b for b in BATCHES if efficiency[b] >= TARGET)
    if choice == best:
        return None
    if choice not in BATCHES:
        return f"choose one of {list(BATCHES)}; got {short(choice)}."
    if efficiency[choice] < TARGET:
        return (f"{choice} scales at about {efficiency[choice]:.0%}, below the 90% asked for: the "
                "all-reduce is still too large a share of its step.")
    return (f"{choice} scales well enough, but so does {best}, with a global batch "
            f"{choice // best} times smaller, which needs a smaller scaled learning rate and is "
            "less likely to need a warm-up. Take the smallest batch that reaches 90%.")


# ---- q5.3: a schedule in Keras ---------------------------------------------------------------
#: (base_lr, num_replicas, steps_per_epoch, warmup_epochs, decay_epochs): the public recipes.
SCHEDULE_CASES = ((0.05, 8, 11, 1, [3]), (0.1, 4, 5, 2, [4, 6]))


def schedule_steps(base_lr, num_replicas, steps_per_epoch, warmup_epochs, decay_epochs) -> list:
    """The steps a recipe is read at: each side of the end of the warm-up and of every decay."""
    warm = warmup_epochs * steps_per_epoch
    marks = {0, 1, warm // 2, warm - 1, warm, warm + 1}
    for d in decay_epochs:
        marks |= {d * steps_per_epoch - 1, d * steps_per_epoch, d * steps_per_epoch + 1}
    marks.add((max(decay_epochs, default=warmup_epochs) + 2) * steps_per_epoch)
    return sorted(m for m in marks if m >= 0)


def recipe_rate(step, base_lr, num_replicas, steps_per_epoch, warmup_epochs, decay_epochs) -> float:
    """The recipe's rate at ``step`` (optimizer.iterations: 0 before the first update)."""
    peak, warm = base_lr * num_replicas, warmup_epochs * steps_per_epoch
    if step < warm:
        return base_lr + (peak - base_lr) * step / warm
    return peak * 0.1 ** sum(step // steps_per_epoch >= d for d in decay_epochs)


def keras_rates(schedule, steps: list) -> list[float]:
    """Run ``schedule`` as Keras does: an SGD optimizer's learning rate, read in a tf.function."""
    import keras
    import tensorflow as tf

    if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        raise Wrong(f"it returned {type(schedule).__name__}, not a keras.optimizers.schedules"
                        ".LearningRateSchedule (a subclass with __call__(self, step))")
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    read = tf.function(lambda: tf.convert_to_tensor(optimizer.learning_rate))
    rates = []
    for step in steps:
        optimizer.iterations.assign(step)
        rates.append(float(read()))
    return rates


@dataclass(frozen=True)
class ScheduleFunction(Function):
    """A function that returns a schedule: each call's result is the schedule's rates, read by
    :func:`keras_rates` at :func:`schedule_steps` of the case."""

    def export(self, fn, hidden: list) -> dict:
        if not callable(fn):
            return super().export(fn, hidden)

        def rates(*case):
            return keras_rates(fn(*case), schedule_steps(*case))

        data = super().export(rates, hidden)
        try:
            data["source"] = inspect.getsource(fn)[:20_000]
        except (TypeError, OSError):
            data["source"] = ""
        return data


@question("q5.3", "05_scaling_experiments",
          "write scaled_schedule(base_lr, num_replicas, steps_per_epoch, warmup_epochs, "
          "decay_epochs): a Keras LearningRateSchedule for the linear scaling rule, a linear "
          "warm-up and a tenfold decay at each listed epoch",
          right="your schedule gives the recipe's rate at every step read, through a Keras "
                "optimizer inside a tf.function: base_lr at step 0, the same rise every step to "
                "base_lr × num_replicas at the end of the warm-up, and a tenth of the rate from "
                "the first step of each decay epoch, on every recipe tried.",
          kind=ScheduleFunction("scaled_schedule", SCHEDULE_CASES))
def _q5_3(calls):
    for case, out in calls:
        base, k, spe, warm_epochs, decays = case
        steps = schedule_steps(*case)
        if not isinstance(out, list) or len(out) != len(steps):
            return f"{calls.shown(case)} gave {short(out)}; expected a rate at each of {steps}."
        for step, got in zip(steps, out):
            want = recipe_rate(step, *case)
            if not isinstance(got, (int, float)) or isinstance(got, bool):
                return f"{calls.shown(case)} at step {step} gives {short(got)}, not a rate."
            if close(got, want):
                continue
            peak, warm = base * k, warm_epochs * spe
            after = [(s, g) for s, g in zip(steps, out) if s >= warm and isinstance(g, (int, float))]
            if k > 1 and after and all(close(g * k, recipe_rate(s, *case)) for s, g in after):
                hint = (" After the warm-up your rates are the recipe's divided by num_replicas: "
                        "that is the rate without the linear scaling rule.")
            elif step == 0 and warm and close(got, peak):
                hint = " It starts at the peak: the warm-up should start from base_lr."
            elif step < warm:
                hint = (f" During the warm-up the rate rises by the same amount every step, "
                        f"(peak - base_lr) / {warm} here, from base_lr at step 0.")
            else:
                hint = (" From the first step of each listed epoch (step // steps_per_epoch >= "
                        "that epoch) the rate is a tenth of what it was.")
            return (f"{calls.shown(case)} at step {step} (optimizer.iterations, epoch "
                    f"{step // spe}) gives {fmt(got)}; the recipe gives {fmt(want)}.{hint}")
    return None
