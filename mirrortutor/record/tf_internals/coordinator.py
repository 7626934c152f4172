"""The wall, parameter-server half: what the recording ``ParameterServerStrategy`` and
``ClusterCoordinator`` need of TensorFlow beyond its public API.

Checked against TensorFlow 2.21. Each use says *why* no public API does it.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf
# Why: a variable placed by hand, outside every creator scope (the strategy's included), and the
# status of a RemoteValue without waiting for it; tf.distribute documents neither.
from tensorflow.python.distribute.coordinator import remote_value
from tensorflow.python.ops import resource_variable_ops

__all__ = ["finished", "observe_variable_creation", "unplaced_variable"]


def observe_variable_creation(strategy, created: Callable) -> None:
    """Call ``created(variable)`` with every variable ``strategy``'s scope creates.

    Why private: ``ParameterServerStrategyV2Extended._create_variable`` (TF's
    parameter_server_strategy_v2.py) is where TF decides each variable's ps task (round robin, or
    shards with a partitioner); tf.distribute offers no hook there. The method is wrapped on this
    one instance, so TF's own code still places every variable.
    """
    extended = strategy.extended
    original = extended._create_variable

    def create_variable(next_creator, **kwargs):
        variable = original(next_creator, **kwargs)
        created(variable)
        return variable

    extended._create_variable = create_variable


def unplaced_variable(device: str, name: str) -> tf.Variable:
    """An int64 counter at 0 on ``device``, created outside every variable creator.

    Why private: ``tf.Variable(...)`` goes through the creator stack, and inside a
    ParameterServerStrategy's scope its creator would place the counter round robin, moving the
    program's own variables to other ps tasks. Constructing ``ResourceVariable`` itself skips the
    stack (``VariableMetaclass.__call__`` in TF's variables.py only dispatches ``tf.Variable``).
    """
    with tf.init_scope(), tf.device(device):
        return resource_variable_ops.ResourceVariable(
            0, dtype=tf.int64, trainable=False, name=name)


def finished(value) -> bool:
    """Whether a RemoteValue has its result (or its error): ``fetch()`` would not wait.

    Why private: ``RemoteValue`` has no public "is it ready"; ``fetch`` blocks until it is.
    """
    return value._status != remote_value.RemoteValueStatus.NOT_READY
