"""The chapter-5 experiment panel: change the settings, press Run, watch the charts redraw.

:class:`ScalingLab` runs a training function the notebook defines (chapter 05's ``train``, which
runs the chapter's program with ``mt.run_program``) and draws what it returns: each run adds one
line per chart, so runs can be compared side by side. The panel trains nothing itself. Bad
settings show a message in the panel, which stays usable.

The panel's charts are drawn by :mod:`mirrortutor.plots.scaling`; ``loss_chart``, ``time_chart``
and ``scaling_chart`` are re-exported here, so ``mt.widgets.loss_chart(runs)`` draws the same
chart outside the panel. ``show(widget, text)`` displays any widget with ``text`` as what a stored
notebook shows (:mod:`mirrortutor.panel`).
"""

from __future__ import annotations

from typing import Callable, Mapping

import ipywidgets as W
import plotly.graph_objects as go

from .collectives import costmodel
from .errors import MirrortutorError, ScalingConfigError
from .panel import Panel, show
from .plots.scaling import loss_chart, scaling_chart, time_chart

#: What a training function takes (keyword arguments) and returns: a dict with the keys the charts
#: read (mirrortutor.plots.scaling): label, replicas, per_replica_batch, global_batch,
#: steps_per_epoch, loss, test_accuracy, step_s, parameters.
TrainFunction = Callable[..., Mapping[str, object]]


class ScalingLab:
    """Widgets that call ``train(replicas=…, per_replica_batch=…, epochs=…, lr_rule=…,
    base_lr=…)`` and compare the runs it returns in charts.

    >>> lab = mt.widgets.ScalingLab(train, devices)   # doctest: +SKIP
    >>> lab                                            # doctest: +SKIP  (shows the panel)
    """

    #: What the stored notebook shows in the panel's place (its widgets need a running kernel).
    STATIC_TEXT = ("ScalingLab: controls for replicas, batch size, epochs, learning-rate rule and "
                   "modelled interconnect, a Run button and two charts. Run the notebook to use it.")

    def __init__(self, train: TrainFunction, devices: list | None = None, *,
                 lr_rules: tuple[str, ...] = ("fixed", "linear", "warmup")):
        if not callable(train):
            raise ScalingConfigError(f"ScalingLab needs the training function to call, got "
                                   f"{train!r}: define train(replicas, lr_rule, base_lr, "
                                   "per_replica_batch, epochs) in the notebook and pass it.")
        if devices is None:
            import tensorflow as tf

            devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        self.train, self.devices = train, list(devices)
        self.results: list[Mapping[str, object]] = []
        style = {"description_width": "150px"}
        layout = W.Layout(width="380px")
        self.replicas = W.IntSlider(min(4, len(self.devices)), 1, len(self.devices),
                                    description="replicas", style=style, layout=layout)
        self.per_replica_batch = W.Dropdown(options=[8, 16, 32, 64], value=16,
                                            description="per-replica batch", style=style,
                                            layout=layout)
        self.epochs = W.IntSlider(4, 1, 20, description="epochs", style=style, layout=layout)
        self.lr_rule = W.Dropdown(options=list(lr_rules), value=lr_rules[-1],
                                  description="learning-rate rule", style=style, layout=layout)
        self.base_lr = W.FloatText(0.05, description="base rate (1 replica)", style=style,
                                   layout=layout)
        self.interconnect = W.Dropdown(options=costmodel.preset_names(), value="nvlink3-a100",
                                       description="modelled link", style=style, layout=layout)
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.sweep_button = W.Button(description=f"Sweep 1→{len(self.devices)}", icon="forward")
        self.clear_button = W.Button(description="Clear", icon="trash")
        self.status = W.HTML("idle")
        self.message = W.HTML("")
        self.output = W.Output()  # what the training function prints
        self.run_button.on_click(lambda _: self._guarded(self.run))
        self.sweep_button.on_click(lambda _: self._guarded(self.sweep))
        self.clear_button.on_click(lambda _: self.clear())
        self.interconnect.observe(lambda _: self._redraw_all(), names="value")
        self.loss_chart = go.FigureWidget(loss_chart([]))
        self.scaling_chart = go.FigureWidget(scaling_chart([]))
        controls = W.VBox([self.replicas, self.per_replica_batch, self.epochs, self.lr_rule,
                           self.base_lr, self.interconnect,
                           W.HBox([self.run_button, self.sweep_button, self.clear_button]),
                           self.status, self.message])
        self.panel = W.VBox([W.HBox([controls, self.output]), self.loss_chart,
                             self.scaling_chart])

    def _ipython_display_(self):
        from IPython.display import display

        display(Panel(self.panel, self.STATIC_TEXT))

    # ---- running ----------------------------------------------------------------------------
    def settings(self, **overrides) -> dict:
        """The keyword arguments the widgets show now (with ``overrides``)."""
        return dict(dict(replicas=self.replicas.value, per_replica_batch=self.per_replica_batch.value,
                         epochs=self.epochs.value, lr_rule=self.lr_rule.value,
                         base_lr=self.base_lr.value), **overrides)

    def _guarded(self, action) -> None:
        try:
            self.message.value = ""
            action()
        except (MirrortutorError, ValueError) as exc:  # bad settings: say so, stay usable
            self.message.value = f"<b style='color:#b00'>Cannot run:</b> {exc}"
        finally:
            self.status.value = "idle"

    def run(self, **overrides) -> Mapping[str, object]:
        """One call of the training function with the current settings; its lines are added to
        every chart."""
        settings = self.settings(**overrides)
        self.status.value = f"training {settings['replicas']} replica(s)…"
        with self.output:
            result = self.train(**settings)
        self.add(result)
        return result

    def sweep(self) -> list[Mapping[str, object]]:
        """Runs at 1, 2, 4, … up to every device, with the other settings as shown."""
        every = len(self.devices)
        counts = sorted({n for n in (1, 2, 4, 8, 16) if n <= every} | {every})
        return [self.run(replicas=n) for n in counts]

    def clear(self) -> None:
        """Forget every run and empty the charts."""
        self.results.clear()
        self.output.clear_output()
        self._redraw_all()

    # ---- charts ---------------------------------------------------------------------------
    def add(self, result: Mapping[str, object]) -> None:
        """Draw one result into the charts (``run`` calls this)."""
        self.results.append(result)
        self._redraw_all()

    def _redraw_all(self) -> None:
        self._redraw(self.loss_chart, loss_chart(self.results))
        self._redraw(self.scaling_chart, scaling_chart(self.results, self.interconnect.value))

    @staticmethod
    def _redraw(widget: go.FigureWidget, fig: go.Figure) -> None:
        with widget.batch_update():
            widget.data = []
            widget.add_traces(list(fig.data))
            widget.update_layout(fig.layout)


__all__ = ["Panel", "ScalingLab", "loss_chart", "scaling_chart", "show", "time_chart"]
