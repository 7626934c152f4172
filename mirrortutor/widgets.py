"""The chapter-5 experiment panel: change the replicas, press Run, watch the charts redraw.

:class:`ScalingLab` is a thin ipywidgets layer over :func:`mirrortutor.experiments.run_scaling`:
each run adds one line per chart, so runs can be compared side by side. Bad settings show a
message in the panel, which stays usable.

The panel's charts are drawn by :mod:`mirrortutor.plots.scaling`; ``loss_chart``, ``time_chart``
and ``scaling_chart`` are re-exported here, so ``mt.widgets.loss_chart(runs)`` draws the same
chart outside the panel. TensorFlow is imported only when a panel is made. ``show(widget, text)``
displays any widget with ``text`` as what a stored notebook shows (:mod:`mirrortutor.panel`).
"""

from __future__ import annotations

import ipywidgets as W
import plotly.graph_objects as go

from .collectives import costmodel
from .errors import MirrortutorError
from .panel import Panel, show
from .plots.scaling import loss_chart, scaling_chart, time_chart
from .training import scaling as experiments


class ScalingLab:
    """Widgets to run :func:`~mirrortutor.experiments.run_scaling` and compare runs in charts.

    >>> lab = mt.widgets.ScalingLab()   # doctest: +SKIP
    >>> lab                              # doctest: +SKIP  (shows the panel)
    """

    #: What the stored notebook shows in the panel's place (its widgets need a running kernel).
    STATIC_TEXT = ("ScalingLab: controls for replicas, batch sizes, model and interconnect, a Run "
                   "button and three charts. Run the notebook to use it.")

    def __init__(self, devices: list[str] | None = None,
                 config: experiments.ScalingConfig | None = None):
        import tensorflow as tf

        if devices is None:
            gpus = tf.config.list_logical_devices("GPU")
            devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        self.devices = list(devices)
        self.results: list[experiments.ScalingResult] = []
        c = config or experiments.ScalingConfig(replicas=min(4, len(self.devices)))
        style = {"description_width": "150px"}
        layout = W.Layout(width="380px")
        self.replicas = W.IntSlider(c.replicas, 1, len(self.devices), description="replicas",
                                    style=style, layout=layout)
        self.per_replica_batch = W.Dropdown(options=[8, 16, 32, 64], value=c.per_replica_batch,
                                            description="per-replica batch", style=style,
                                            layout=layout)
        self.global_batch = W.IntText(0, description="or global batch (0: off)", style=style,
                                      layout=layout)
        self.width = W.IntSlider(c.width, 16, 256, step=16, description="layer width", style=style,
                                 layout=layout)
        self.depth = W.IntSlider(c.depth, 1, 4, description="hidden layers", style=style,
                                 layout=layout)
        self.epochs = W.IntSlider(c.epochs, 1, 20, description="epochs", style=style, layout=layout)
        self.lr_rule = W.Dropdown(options=list(experiments.LR_RULES), value=c.lr_rule,
                                  description="learning-rate rule", style=style, layout=layout)
        self.cross_device_ops = W.Dropdown(options=list(experiments.CROSS_DEVICE_OPS),
                                           value=c.cross_device_ops, description="all-reduce",
                                           style=style, layout=layout)
        self.prefetch = W.Checkbox(c.prefetch, description="prefetch input", indent=False)
        self.interconnect = W.Dropdown(options=costmodel.preset_names(), value=c.interconnect,
                                       description="modelled link", style=style, layout=layout)
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.sweep_button = W.Button(description=f"Sweep 1→{len(self.devices)}", icon="forward")
        self.clear_button = W.Button(description="Clear", icon="trash")
        self.progress = W.IntProgress(0, 0, 1, description="idle", style=style, layout=layout)
        self.message = W.HTML("")
        self.settings = W.HTML("")
        self._base = c
        self.run_button.on_click(lambda _: self._guarded(self.run))
        self.sweep_button.on_click(lambda _: self._guarded(self.sweep))
        self.clear_button.on_click(lambda _: self.clear())
        self.loss_chart = go.FigureWidget(loss_chart([]))
        self.time_chart = go.FigureWidget(time_chart([]))
        self.scaling_chart = go.FigureWidget(scaling_chart([]))
        controls = W.VBox([self.replicas, self.per_replica_batch, self.global_batch, self.width,
                           self.depth, self.epochs, self.lr_rule, self.cross_device_ops,
                           self.interconnect, self.prefetch,
                           W.HBox([self.run_button, self.sweep_button, self.clear_button]),
                           self.progress, self.message, self.settings])
        self.panel = W.VBox([controls, self.loss_chart,
                             W.HBox([self.time_chart, self.scaling_chart])])

    def _ipython_display_(self):
        from IPython.display import display

        display(Panel(self.panel, self.STATIC_TEXT))

    # ---- running ----------------------------------------------------------------------------
    def config(self, **overrides) -> experiments.ScalingConfig:
        """The settings the widgets show now (with ``overrides``)."""
        values = dict(replicas=self.replicas.value, per_replica_batch=self.per_replica_batch.value,
                      width=self.width.value, depth=self.depth.value, epochs=self.epochs.value,
                      lr_rule=self.lr_rule.value, cross_device_ops=self.cross_device_ops.value,
                      prefetch=self.prefetch.value, interconnect=self.interconnect.value)
        values.update(overrides)
        if self.global_batch.value and "per_replica_batch" not in overrides:
            values.pop("per_replica_batch")
            return experiments.config_for_global_batch(
                self.global_batch.value, **{**self._base.__dict__, **values})
        return experiments.ScalingConfig(**{**self._base.__dict__, **values})

    def _guarded(self, action) -> None:
        try:
            self.message.value = ""
            action()
        except (MirrortutorError, ValueError) as exc:  # bad settings: say so, stay usable
            self.message.value = f"<b style='color:#b00'>Cannot run:</b> {exc}"
        finally:
            self.progress.description = "idle"

    def run(self, **overrides) -> experiments.ScalingResult:
        """One run with the current settings; its lines are added to every chart."""
        config = self.config(**overrides)
        self.progress.max, self.progress.value = config.epochs, 0
        self.progress.description = f"{config.replicas} replica(s)"

        def on_epoch(record):
            self.progress.value = record.epoch

        def on_update(partial):  # redraw the loss chart after every epoch: live feedback
            self._redraw(self.loss_chart, loss_chart(self.results + [partial]))

        result = experiments.run_scaling(config, devices=self.devices, show_progress=False,
                                         on_epoch=on_epoch,
                                         on_update=on_update)
        self.add(result)
        return result

    def sweep(self) -> list[experiments.ScalingResult]:
        """Runs at 1, 2, 4, … up to every device, with the other settings as shown."""
        every = len(self.devices)
        counts = sorted({n for n in (1, 2, 4, 8, 16) if n <= every} | {every})
        return [self.run(replicas=n) for n in counts]

    def clear(self) -> None:
        """Forget every run and empty the charts."""
        self.results.clear()
        for fig in (self.loss_chart, self.time_chart, self.scaling_chart):
            with fig.batch_update():
                fig.data = []
        self.settings.value = ""

    # ---- charts ---------------------------------------------------------------------------
    def add(self, result: experiments.ScalingResult) -> None:
        """Draw one result into the charts (``run`` calls this)."""
        self.results.append(result)
        for widget, build in ((self.loss_chart, loss_chart), (self.time_chart, time_chart),
                              (self.scaling_chart, scaling_chart)):
            self._redraw(widget, build(self.results))
        self.settings.value = (
            f"Last run: global batch <b>{result.global_batch}</b> = "
            f"{result.config.per_replica_batch} per replica × {result.config.replicas}; "
            f"learning rate <b>{result.peak_learning_rate:g}</b> "
            f"({result.config.lr_rule}); {result.num_parameters:,} parameters; step "
            f"{result.global_batch / result.throughput * 1e3:.1f} ms here.")

    @staticmethod
    def _redraw(widget: go.FigureWidget, fig: go.Figure) -> None:
        with widget.batch_update():
            widget.data = []
            widget.add_traces(list(fig.data))
            widget.update_layout(fig.layout)


__all__ = ["Panel", "ScalingLab", "loss_chart", "scaling_chart", "show", "time_chart"]
