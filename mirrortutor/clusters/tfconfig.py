"""``mt.tf_config``: the ``TF_CONFIG`` one worker of a multi-worker cluster reads.

TensorFlow's ``TFConfigClusterResolver`` (what ``MultiWorkerMirroredStrategy()`` uses when no
resolver is given) reads the cluster and this task from the JSON in the ``TF_CONFIG`` environment
variable: ``{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": i}}``.
"""

from __future__ import annotations

from ..errors import ClusterConfigError, WorkerIndexError
from ..validate import whole_number

__all__ = ["tf_config"]


def tf_config(workers: list[str], index: int) -> dict:
    """The ``TF_CONFIG`` of worker ``index`` in a cluster of ``workers`` (``"host:port"`` each).

    The same on every machine except ``task.index``; worker 0 is the chief (it writes the
    checkpoints). Set it as JSON in the environment before the program creates its strategy:
    ``os.environ["TF_CONFIG"] = json.dumps(mt.tf_config([...], index))``.
    """
    if isinstance(workers, str) or not list(workers):
        raise ClusterConfigError(
            f"workers must be a list of at least one 'host:port' address, one per worker, but got "
            f"{workers!r}. For example mt.tf_config(['10.0.0.1:12345', '10.0.0.2:12345'], 0).")
    workers = list(workers)
    for address in workers:
        host, _, port = str(address).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ClusterConfigError(
                f"{address!r} is not a 'host:port' address (a host name or IP, a colon, a port "
                f"from 1 to 65535). Write each worker as 'hostname:12345'.")
    if len(set(workers)) != len(workers):
        raise ClusterConfigError(f"Two workers share an address in {workers!r}; each worker "
                                 "needs its own host:port.")
    whole_number(index, WorkerIndexError, f"index must be this worker's position in the list, "
                 f"0 to {len(workers) - 1}, but got {index!r}.", low=0, high=len(workers) - 1)
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
