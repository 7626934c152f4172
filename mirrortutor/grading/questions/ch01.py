"""Chapter 01 · MirroredVariable: what every copy of a variable holds after the replicas write it.

The rule taught: each replica writes its own value, then the variable's ``aggregation`` decides
what every copy receives (``MEAN`` averages the replicas' values, ``SUM`` adds them,
``ONLY_FIRST_REPLICA`` takes replica 0's, ``NONE`` leaves each copy its own). ``assign`` replaces
the old value, ``assign_add`` adds to it. A sync-on-read variable keeps one copy per replica,
writes touch only the local copy, and a read outside ``strategy.run`` combines the copies.

The chapter printed MEAN and SUM after assign and assign_add, and ONLY_FIRST_REPLICA after assign.
The questions ask for what it did not print: ONLY_FIRST_REPLICA after assign_add (q1.1, q1.2), and
a sync-on-read SUM variable that starts at 5.0 (q1.3, q1.4), whose read counts the 5.0 once per
copy. q1.2 and q1.4 read a real ``tf.distribute`` variable: the check hands over its type,
aggregation and per-device copies (:func:`mirrortutor.grading.answers.to_data`), never the object.
"""

from __future__ import annotations

from ..checks import choice, close, fmt, hint_for, judge_number, numbers, question


def _variable(data, copies: int, aggregation: str, value, build: str,
              kind: str = "MirroredVariable"):
    """Why ``data`` (a variable's data) is not a ``kind`` with ``copies`` copies holding ``value``
    (one number for every copy, or a list, one per copy) under ``aggregation``; None when it is."""
    if not isinstance(data, dict) or "copies" not in data:
        return (f"expected a {kind}, got {data if isinstance(data, str) else type(data).__name__}. "
                f"Create it inside `with strategy.scope():` of {build}.")
    if data.get("type") != kind:
        return (f"it is a {data.get('type')}, expected a {kind}"
                + (": create it with synchronization=tf.VariableSynchronization.ON_READ."
                   if kind == "SyncOnReadVariable" else "."))
    got = numbers(data["copies"], "its copies")
    if len(got) != copies:
        return f"it has {len(got)} copies; build the strategy as {build}."
    if data.get("aggregation") != aggregation:
        return (f"its aggregation is {data.get('aggregation')}; create it with "
                f"aggregation=tf.VariableAggregation.{aggregation}.")
    expected = value if isinstance(value, list) else [value] * copies
    if not all(close(c, e) for c, e in zip(got, expected)):
        wanted = (f"{[fmt(e) for e in expected]}" if isinstance(value, list)
                  else f"{fmt(value)} each")
        return f"its copies hold {[fmt(c) for c in got]}, expected {wanted}."
    return None


# q1.1 and q1.2: ONLY_FIRST_REPLICA with assign_add (the chapter showed it only with assign).
# Replica 0's increment, 0 + 1, is broadcast and added to the old 4.0 on every copy.
FIRST_ADD = 4.0 + 1.0


@question("q1.1", "01_mirrored_variable",
          "predict an ONLY_FIRST_REPLICA variable holding 4.0 after each of 8 replicas does "
          "assign_add(replica_id + 1)",
          right="every copy holds 5.0: ONLY_FIRST_REPLICA keeps replica 0's increment (0 + 1 = 1) "
                "and ignores the others', and assign_add adds it to the old 4.0.")
def _q1_1(answer):
    increments = [float(i + 1) for i in range(8)]  # what the 8 replicas add, one each
    values = numbers(answer, "your prediction")
    if len(values) not in (1, 8):
        return f"give one number, or a list of the 8 copies; you gave {len(values)} values."
    if all(close(v, FIRST_ADD) for v in values):
        return None
    if values == [4.0 + i for i in increments]:
        return ("4 + 1, 4 + 2, …, 4 + 8 is what aggregation=NONE leaves: each replica writes only "
                "its own copy. ONLY_FIRST_REPLICA adds replica 0's increment to every copy.")
    hints = {1.0: "1.0 is replica 0's increment, but assign_add adds it to the old 4.0: assign "
                  "would replace it.",
             40.0: "40 is 4.0 + (1 + 2 + … + 8): that is SUM, not ONLY_FIRST_REPLICA.",
             8.5: "8.5 is 4.0 + the MEAN of 1 … 8: that is MEAN, not ONLY_FIRST_REPLICA.",
             12.0: "12 is 4.0 + the last replica's 8; ONLY_FIRST_REPLICA keeps replica 0's.",
             4.0: "4.0 is the old value, but replica 0's increment is added to it."}
    if len(values) == 8 and close(values[0], FIRST_ADD) and all(close(v, 4.0) for v in values[1:]):
        return ("copy 0 is right, but the other copies change too: ONLY_FIRST_REPLICA keeps replica "
                "0's increment (1.0) and adds it to every copy (apply_aggregation broadcasts it).")
    wrong = next(i for i, v in enumerate(values) if not close(v, FIRST_ADD))
    hint = hint_for(values[wrong], hints, "Which replica's increment does ONLY_FIRST_REPLICA keep, "
                                          "and what does assign_add do with it?")
    if len(values) == 1:
        return f"you predicted {fmt(values[0])}, but every copy holds another value. {hint}"
    return f"you predicted {fmt(values[wrong])} for copy {wrong}, but it holds another value. {hint}"


@question("q1.2", "01_mirrored_variable",
          "make the ONLY_FIRST_REPLICA variable on 8 devices, have each replica assign_add its id "
          "+ 1, pass the variable",
          right="a MirroredVariable with 8 copies, aggregation ONLY_FIRST_REPLICA, every copy 5.0, "
                "the value q1.1's check expects.")
def _q1_2(data):
    problem = _variable(data, 8, "ONLY_FIRST_REPLICA", FIRST_ADD, "mt.MirroredStrategy(devices)")
    if problem and problem.startswith("its copies hold"):
        problem += (" Does every replica call assign_add(tf.cast(replica_id_in_sync_group, "
                    "tf.float32) + 1) inside strategy.run?")
    return problem


# q1.3 and q1.4: predict, then observe. A sync-on-read SUM variable created holding 5.0 on 3
# replicas: every copy starts at 5.0. Each replica adds its id + 1 to its own copy only (6, 7, 8),
# and a read outside strategy.run adds the copies: 21.
ON_READ_COPIES = [5.0 + 1.0, 5.0 + 2.0, 5.0 + 3.0]
ON_READ_SUM = sum(ON_READ_COPIES)


@question("q1.3", "01_mirrored_variable",
          "predict read_value() of a sync-on-read SUM variable made holding 5.0 on 3 replicas, after "
          "each replica does assign_add(replica_id + 1)",
          right="21.0: every one of the 3 copies started at 5.0 and added only its own replica's "
                "increment (6, 7, 8), and a read outside strategy.run adds the copies.")
def _q1_3(answer):
    return judge_number(
        answer, "your prediction", ON_READ_SUM,
        hints={11.0: "11 is 5.0 + (1 + 2 + 3): the 5.0 counted once, as in a MirroredVariable. "
                     "Here each of the 3 copies starts at 5.0 (creating the variable does not divide "
                     "it, as a top-level assign would), and the read adds the copies.",
               6.0: "6 is replica 0's copy alone (5 + 1), or 1 + 2 + 3 without the starting value: "
                    "the read outside strategy.run adds every copy, and each copy kept its 5.0.",
               8.0: "8 is one copy, the last replica's; the read outside run adds all copies.",
               7.0: "7 is the copies' MEAN; this variable's aggregation is SUM.",
               15.0: "15 is what it reads before any replica adds anything: now add the increments.",
               5.0: "5.0 is one copy's starting value, but every replica added to its own copy."},
        fallback="What does each copy hold after its own replica's assign_add, and what does a "
                 "SUM read do with the copies?")


WHY_1_4 = {"A": "A counts the starting 5.0 once: that is a MirroredVariable, whose copies are one "
                "value (or it divides 5.0 among the copies, as a top-level assign would; creating "
                "the variable does not). Here the 3 copies each held 5.0 and the read adds them.",
           "C": "C would read replica 0's copy alone (6.0); a SUM read adds every copy."}


@question("q1.4", "01_mirrored_variable",
          "run q1.3 on devices[:3]; pass (the variable, the letter of the explanation)",
          right="TensorFlow's copies hold 6.0, 7.0 and 8.0 and the read gives 21.0 (B): each "
                "replica's assign_add touched only its own copy, and the SUM read adds the copies, "
                "the starting 5.0 once per copy.",
          parts="(variable, why)")
def _q1_4(variable, why):
    problem = _variable(variable, 3, "SUM", ON_READ_COPIES, "mt.MirroredStrategy(devices[:3])",
                        kind="SyncOnReadVariable")
    if problem and problem.startswith("its copies hold"):
        problem += " Each replica calls assign_add(tf.cast(replica_id_in_sync_group, tf.float32) + 1)."
    return problem or WHY_1_4.get(choice(why, "ABC", "why"))
