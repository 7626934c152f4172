"""The recording around ``strategy.run`` that every instrumented strategy shares: a mixin.

:class:`RecordingStrategy` goes in front of a ``tf.distribute`` strategy class
(``class MirroredStrategy(RecordingStrategy, tf.distribute.MirroredStrategy)``). Around each
``run`` it tells the strategy's :class:`~.recorder.Recorder` a step begins and ends; the recorder
writes the trace.
"""

from __future__ import annotations

import tensorflow as tf

from .recorder import Recorder
from .records import Recording, VariableSnapshot
from .trace import Trace


class RecordingStrategy:
    """Mixin: recording around ``run`` for a ``tf.distribute`` strategy (see the module doc)."""

    def _begin_recording(self, recording: Recording | None) -> Recorder:
        """Before the extended object exists: the recorder that variable creation reports to."""
        self._recorder = Recorder(recording)
        return self._recorder

    @property
    def trace(self) -> Trace:
        """What this strategy recorded (see :class:`~mirrortutor.Trace`)."""
        return self._recorder.trace

    @tf.autograph.experimental.do_not_convert  # TF's own run is not converted either
    def run(self, fn, args=(), kwargs=None, options=None):
        """``tf.distribute.Strategy.run``, recording shards, outputs and the sync check."""
        tf_run = super().run
        return self._recorder.step(lambda: tf_run(fn, args=args, kwargs=kwargs, options=options),
                                   args, kwargs, list(self.extended.worker_devices))

    def reduce(self, reduce_op, value, axis):
        """``tf.distribute.Strategy.reduce``; its ``axis=...`` path calls ``run`` itself (to sum
        within each replica first), which is part of this reduction, not a step."""
        self._recorder.in_reduce += 1
        try:
            return super().reduce(reduce_op, value, axis)
        finally:
            self._recorder.in_reduce -= 1

    def snapshot(self, label: str = "") -> list[VariableSnapshot]:
        """Record every replica's copy of every variable now (call it outside ``tf.function``)."""
        return self._recorder.snapshot(label)
