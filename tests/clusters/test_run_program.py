"""``cluster.run_program``: a plain TensorFlow script, unchanged, in every worker process.

Each worker runs the file as ``python SCRIPT ARGS`` would, with its own TF_CONFIG, under the
recording substitution (``record=True``) or stock TensorFlow (``record=False``). The result says
how each worker ended (exit status, stdout, stderr's tail, the error line and its traceback's
frames) and, recorded, holds the
workers' traces merged. ``kill_worker``/``at_step`` kill one worker's process from outside the
program, in a given step: the other worker's next collective fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mirrortutor as mt
from mirrortutor.errors import (ClusterConfigError, ClusterStateError, JobConfigError,
                                ProgramError, WorkerIndexError)

#: A small synchronous loop (plain TF); worker 1 raises on purpose when given --fail.
PROGRAM = str(Path(__file__).resolve().parent / "programs" / "steps.py")


@pytest.fixture(scope="module")
def program():
    return PROGRAM


def test_the_same_script_runs_in_every_worker_recorded_and_on_stock_tf(program):
    """Recorded and stock runs print the same bytes on both workers; the recorded one's traces
    merge (each worker's shard, the all-reduce's sum); a failing worker's error line says what it
    raised; and a killed worker is -9 while the other fails in its next collective."""
    with mt.MultiWorkerCluster(workers=2, grace=20) as cluster:
        recorded = cluster.run_program(program, "--steps", "4")
        stock = cluster.run_program(program, "--steps", "4", record=False)
        failing = cluster.run_program(program, "--steps", "4", "--fail", record=False)
        killed = cluster.run_program(program, "--steps", "40", kill_worker=1, at_step=3)
    assert recorded.ok and stock.ok, recorded.summary() + stock.summary()
    assert [w.stdout for w in recorded.workers] == [w.stdout for w in stock.workers]
    assert recorded.workers[0].stdout == recorded.workers[1].stdout
    assert recorded.workers[0].stdout.count("\n") == 4
    assert stock.traces is None and recorded.traces is not None
    ids = [recorded.trace(w).example_ids(0)[0].tolist() for w in (0, 1)]
    assert ids == [[0, 1, 2, 3], [4, 5, 6, 7]]  # DATA: each worker its half of the batch
    assert recorded.traces.allreduce_error(0) < 1e-6
    assert [w.exit_code for w in failing.workers][1] == 1
    assert failing.workers[1].error == "ValueError: worker 1 was told to fail"
    assert "ValueError: worker 1 was told to fail" in failing.workers[1].stderr_tail
    assert failing.workers[1].frames[-1].endswith("steps.py:<module>")  # where it raised
    assert killed.workers[1].exit_code == -9 and killed.workers[1].killed
    assert killed.workers[1].stdout.splitlines()[-1].startswith("2 ")  # died in step 3
    assert killed.workers[0].exit_code == 1 and killed.workers[0].error
    # the survivor fails in its next collective with the dead worker: in step 3, or in step 4 when
    # the dead worker's recording of step 3 ran after that step's last collective
    assert killed.workers[0].stdout.count("\n") in (3, 4), killed.workers[0].stdout
    assert killed.traces is None and 0 in killed.trace_of
    with pytest.raises(ProgramError, match="killed before it could write"):
        killed.trace(1)


def test_bad_calls_are_refused_before_any_process_starts(program, tmp_path):
    with pytest.raises(ClusterStateError, match="not started"):
        mt.MultiWorkerCluster(workers=2).run_program(program)
    with mt.MultiWorkerCluster(workers=2) as cluster:
        with pytest.raises(ProgramError, match="There is no program"):
            cluster.run_program(tmp_path / "missing.py")
        with pytest.raises(JobConfigError, match="record=True"):
            cluster.run_program(program, kill_worker=1, at_step=2, record=False)
        with pytest.raises(WorkerIndexError, match="workers 0 to 1"):
            cluster.run_program(program, kill_worker=2, at_step=2)
        with pytest.raises(JobConfigError, match="at_step"):
            cluster.run_program(program, kill_worker=1, at_step=-1)
        with pytest.raises(ClusterConfigError, match="mt.Recording"):
            cluster.run_program(program, recording="everything")
    with mt.MultiWorkerCluster(workers=2, replicas_per_worker=2) as cluster:
        with pytest.raises(ClusterConfigError, match="one replica"):
            cluster.run_program(program)
