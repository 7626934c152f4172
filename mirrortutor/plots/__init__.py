"""The course's figures, drawn with plotly: every function returns a ``go.Figure`` (offline, the
same JSON every run), to leave as a cell's last line or ``.show()``.

One module per part of the course:

- :mod:`.trace`: what an instrumented strategy recorded (chapters 01-03). Its figures are
  re-exported here, so ``mt.plots.shard_map(strategy.trace)`` works;
- :mod:`.allreduce`: all-reduce schedules animated, modelled and measured (chapters 04 and 04b,
  ``mt.allreduce_plots``);
- :mod:`.scaling`: scaling runs compared (chapter 05, drawn by ``mt.widgets``);
- :mod:`.ps`: parameter-server training, staleness and convergence (chapters 06-07,
  ``mt.ps_plots``);
- :mod:`.runs`: training runs' losses compared at equal examples, from plain numbers (chapter
  10), re-exported here: ``mt.plots.loss_curves({label: [(examples, losses), ...]})``;
- :mod:`.timeline`: a step's phases per replica as a Gantt chart (chapter 09), re-exported here:
  ``mt.plots.step_timeline(strategy.trace)``;
- :mod:`.style`: the one look they share: replica colours, frame, footnotes, captions.

Nothing here imports TensorFlow: a saved trace can be plotted anywhere plotly runs.
"""

from __future__ import annotations

from .runs import loss_curves
from .style import REPLICA_COLOURS
from .timeline import step_timeline
from .trace import allreduce_diagram, bars_per_replica, gradient_norms, shard_map, variable_values

__all__ = ["REPLICA_COLOURS", "allreduce_diagram", "bars_per_replica", "gradient_norms",
           "loss_curves", "shard_map", "step_timeline", "variable_values"]
