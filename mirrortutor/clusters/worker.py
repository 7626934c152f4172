"""The program each worker process of a multi-worker job runs.

Forked by :mod:`mirrortutor.clusters.launcher` from a forkserver that imported TensorFlow, Keras and
this module once (:func:`forked`, with this worker's ``TF_CONFIG``); ``python -m
mirrortutor.clusters.worker RUN_DIR INDEX`` runs the same program with ``TF_CONFIG`` set. It reads
the run's ``config.json``, builds ``mt.MultiWorkerMirroredStrategy``, runs
:func:`~mirrortutor.training.job.train`, and writes its
:class:`~mirrortutor.training.job.WorkerResult`, trace included, to ``RUN_DIR/worker_INDEX.npz``
for the notebook to merge: mirrortutor's documented file format
(:mod:`mirrortutor.record.persist`), the same a saved ``mt.Trace`` uses, not a pickle.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from ..training.job import TrainingJob, WorkerResult, recording, train
from .processes import die_with_parent
from .program_worker import one_line


def main(run_dir: str, index: int) -> int:
    """One worker: read the run's config, set up replicas, train, write the result."""
    t0 = time.monotonic()
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    job = TrainingJob(**config["job"])
    result = WorkerResult(worker=index, status="failed",
                          tf_config=json.loads(os.environ.get("TF_CONFIG", "{}")),
                          communication=job.communication)
    strategy = None
    code = 0
    try:
        import tensorflow as tf

        from ..record.multiworker import MultiWorkerMirroredStrategy

        options = tf.distribute.experimental.CommunicationOptions(
            implementation=getattr(tf.distribute.experimental.CommunicationImplementation,
                                   job.communication))
        strategy = MultiWorkerMirroredStrategy(
            communication_options=options, replicas_per_worker=config["replicas_per_worker"],
            recording=recording(job))
        kill = config.get("kill") or {}
        train(strategy, job, checkpoint_dir=config.get("checkpoint_dir"),
              kill_at_step=kill.get(str(index)), result=result,
              data_dir=os.path.join(run_dir, f"data_{index}"),
              # inside the run's directory, so it goes with the cluster even after a SIGKILL
              scratch_dir=os.path.join(run_dir, f"scratch_{index}"),
              on_step=lambda n: write_progress(run_dir, index, n))
    except Exception as exc:  # reported to the notebook, which shows every worker's fate
        result.error = one_line(exc)
        result.status, code = "failed", 1
        traceback.print_exc()
    if strategy is not None:
        result.trace = strategy.trace
    result.seconds = time.monotonic() - t0
    result.save(os.path.join(run_dir, result_file(index)))  # written whole, or not at all
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's collective runtime can hang on exit after a peer died; the result is written: leave.
    os._exit(code)


def write_progress(run_dir: str, index: int, steps: int) -> None:
    """Say how many of the job's steps are done (the notebook's bar reads it), atomically."""
    path = os.path.join(run_dir, progress_file(index))
    with open(path + ".tmp", "w") as f:
        f.write(str(steps))
    os.replace(path + ".tmp", path)


def progress_file(index: int) -> str:
    """The file in which worker ``index`` says how many steps of the job it has done."""
    return f"worker_{index}.steps"


def result_file(index: int) -> str:
    """The file worker ``index`` writes its result to, in the run's directory."""
    return f"worker_{index}.npz"


def forked(run_dir: str, index: int, tf_config: str) -> None:
    """A worker forked from the launcher's forkserver: its TF_CONFIG, then :func:`main`."""
    os.environ.update(TF_CONFIG=tf_config, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    main(run_dir, index)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    die_with_parent()  # the launcher died (the notebook was closed): so do we
    main(sys.argv[1], int(sys.argv[2]))
