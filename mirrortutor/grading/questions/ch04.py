"""Chapter 04 · All-reduce algorithms: the ring, step by step, and what it really sends.

The rules taught: in the ring's reduce-scatter, at step s rank r sends chunk ``(r - s) mod n`` to
rank ``(r + 1) mod n``, for s = 0 … n - 2; then an all-gather of n - 1 more steps in which rank r
forwards chunk ``(r + 1 - s) mod n`` and the receiver copies it in. So each rank sends
2(n - 1)/n · S bytes (Patarasuk and Yuan 2009) when the buffer divides into n equal chunks;
otherwise each rank sends the sizes of the chunks it handles, and on 3 or more ranks the ranks
differ (on 2, each rank sends both chunks once: S, whatever the chunks).

The chapter wrote out the reduce-scatter (its closing exercise) and printed bytes for equal chunks.
The questions ask for what it did not print: the all-gather as code (q4.1), the bytes per rank for
uneven chunks, predicted for one case (q4.2) and then written as a rule for any ring (q4.3). The
expected values come from the from-scratch simulator :func:`mirrortutor.collectives.allreduce.ring`.
"""

from __future__ import annotations

import numpy as np

from ...collectives.allreduce import ring
from ..checks import Function, Wrong, disagreements, fmt, numbers, question, short

RING_CASES = ((4, 8), (3, 7), (5, 5), (2, 3))  # (ranks, elements); 7 over 3: chunks 3, 2, 2


def digit_buffers(n: int, size: int) -> tuple[list[np.ndarray]]:
    """Rank r holds 10**r everywhere: each digit 1 of a result marks a rank whose chunk was added."""
    return ([np.full(size, 10.0 ** r) for r in range(n)],)


def after_reduce_scatter(n: int, size: int) -> tuple[list[np.ndarray]]:
    """The ring's buffers after its reduce-scatter, ranks starting from 10**r: rank r owns the
    complete sum of chunk (r + 1) mod n (a value of all 1s), the other chunks partial sums."""
    return (ring(*digit_buffers(n, size), record=True).steps[n - 2].buffers,)


@question("q4.1", "04_allreduce_algorithms",
          "write all_gather(buffers): the ring's n-1 all-gather steps, from the buffers "
          "reduce-scatter leaves, to every rank holding the full sum",
          right="after your all_gather every rank holds the full sum in every chunk, for every "
                "ring size tried (the check compares the buffers at the end, not the sends that "
                "made them).",
          kind=Function("all_gather", RING_CASES, build=after_reduce_scatter))
def _q4_1(calls):
    for (n, size), out in calls:
        want = ring(*digit_buffers(n, size)).values
        if not isinstance(out, list) or len(out) != n:
            return f"for {n} ranks all_gather returned {short(out)}; expected {n} buffers."
        for r in range(n):
            got = np.asarray(out[r], dtype=float).ravel()
            if got.shape != want[r].shape:
                return f"rank {r}'s buffer has {got.size} elements; expected {size}."
            if not np.allclose(got, want[r]):
                return (f"with {n} ranks that started from 1, 10, 100, … (one digit per rank), rank "
                        f"{r} ends with {got.astype(int).tolist()}; the ring gives "
                        f"{want[r].astype(int).tolist()}, every digit 1 once. A digit above 1 means a "
                        "chunk was added where it should be copied; a 0 a chunk that never "
                        "arrived. At step s rank r sends chunk (r + 1 - s) mod n to rank "
                        "(r + 1) mod n, for s = 0 … n - 2.")
    return None


RANKS, ELEMENTS = 3, 10  # float32: 40 bytes, chunks of 4, 3 and 3 elements
SENT = ring([np.zeros(ELEMENTS, np.float32)] * RANKS).bytes_sent_per_rank()  # [56, 52, 52]


def _per_rank(answer, what: str) -> list[float]:
    values = numbers(answer, what)
    if len(values) != RANKS:
        raise Wrong(f"{what} should list one byte count per rank ({RANKS}), got {len(values)}.")
    return values


@question("q4.2", "04_allreduce_algorithms",
          "predict the bytes each of 3 ranks sends in a ring all-reduce of 10 float32 values",
          right="56, 52 and 52 bytes: the 10 values split into chunks of 4, 3 and 3, and each rank "
                "sends the four chunks its steps hand it, so rank 0 sends the big chunk twice.")
def _q4_2(answer):
    got = _per_rank(answer, "your prediction")
    if got == [float(b) for b in SENT]:
        return None
    formula = 2 * (RANKS - 1) / RANKS * 4 * ELEMENTS
    if all(abs(g - formula) < 0.01 for g in got):
        return (f"{fmt(formula)} each is 2(n - 1)/n · S, exact only when the buffer divides into n "
                "equal chunks. 10 values over 3 ranks make chunks of 4, 3 and 3 elements: follow "
                "which chunk each rank sends at each of the 4 steps.")
    if sorted(got) == sorted(float(b) for b in SENT):
        return f"you predicted {[fmt(g) for g in got]}: the right amounts on the wrong ranks."
    return (f"you predicted {[fmt(g) for g in got]}. Count, for each rank, the chunks it sends: "
            "chunk (r - s) mod n in reduce-scatter, (r + 1 - s) mod n in all-gather, 4 bytes per value.")


BYTE_CASES = ((3, 10), (4, 8), (4, 10), (5, 13), (2, 5))  # (ranks, float32 values)


def ring_sent(n: int, count: int) -> list[int]:
    """The bytes each rank sends in the simulator's ring of ``count`` float32 values."""
    return ring([np.zeros(count, np.float32)] * n).bytes_sent_per_rank()


@question("q4.3", "04_allreduce_algorithms",
          "write ring_bytes(num_ranks, count): the bytes each rank sends in a ring all-reduce of "
          "count float32 values",
          right="your ring_bytes gives every rank's bytes for any ring: a rank sends every chunk "
                "but (r + 1) mod n in reduce-scatter and every chunk but (r + 2) mod n in "
                "all-gather, so 2·S minus those two chunks' bytes.",
          kind=Function("ring_bytes", BYTE_CASES))
def _q4_3(calls):
    for (n, count), got, want in disagreements(calls, ring_sent):
        formula = 2 * (n - 1) / n * 4 * count
        if len(got) != n:
            return f"ring_bytes({n}, {count}) returned {len(got)} numbers; expected one per rank ({n})."
        if all(abs(g - formula) < 1 for g in got):
            return (f"ring_bytes({n}, {count}) returned {got}: about 2(n - 1)/n · S each, exact only "
                    f"when {count} values split into {n} equal chunks. The ring sends {want}.")
        return (f"ring_bytes({n}, {count}) returned {got}; the ring sends {want}. Which chunk does "
                "rank r never send in each phase (np.array_split makes the first chunks the "
                "longer ones)?")
    return None
