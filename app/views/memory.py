"""The training-memory panel: per layer, the bytes held for the backward with and without activation
checkpointing, beside parameters and their gradients, as a table and a stacked bar plot.

A trace captured with a backward shows its own table at once. A weights-free trace of a config
estimates one training step on request (two meta captures in a worker process, at a batch and
sequence length the user picks): bytes are shapes times dtypes, labelled as estimates.
"""
from __future__ import annotations

import html
from typing import Any

import panel as pn
import param

from exporters.backward_figure import memory_bokeh, short_layer
from tracer.backward.memory import REST, LayerRow, LayerTable, layer_table

from ..sources import parse_shape, token_shape
from ..state import ExplorerState
from .backward import human_bytes, loss_text
from .docsync import BackgroundJob, Report, refusal_html, text_html

DEFAULT_STEP_SHAPE = "1,4096"
NOTHING = ("This trace has no backward. Capture with CaptureOptions(backward=True) (tracer.trace(..., loss=fn)), or "
           "open a model config to estimate a training step weights-free.")


def memory_isolated(config_path: str, shape: tuple[int, ...], report: Report) -> LayerTable:
    """`training_step_memory` (two weights-free captures) in a worker process: the server's
    interpreter stays free for other sessions meanwhile."""
    from ..worker import run_task

    data = run_task("memory", {"config": str(config_path), "shape": list(shape)}, report, site="memory panel")
    return LayerTable(**{**data, "rows": tuple(LayerRow(**r) for r in data["rows"]), "notes": tuple(data["notes"])})


def table_html(table: LayerTable) -> str:
    """The per-layer table; consecutive layers with equal numbers share one row ("0-31 x32")."""
    ck = table.total_saved_bytes_checkpointed is not None
    head = ["layer", "saved", *(["ckpt"] if ck else []), "params", "grads"]
    groups: list[list[Any]] = []
    for r in table.rows:
        key = (r.module_class, r.saved_bytes, r.saved_bytes_checkpointed, r.param_bytes, r.grad_bytes)
        if groups and groups[-1][0] == key and r.layer != REST:
            groups[-1][2].append(r.layer)
        else:
            groups.append([key, r, [r.layer]])
    body = []
    for _key, r, names in groups:
        many = f"-{short_layer(names[-1])}" if len(names) > 1 else ""
        each = f" x{len(names)} (each)" if len(names) > 1 else ""
        cells = [f"{short_layer(names[0])}{many} {r.module_class}{each}" if r.layer != REST else f"{REST}: {r.module_class}",
                 human_bytes(r.saved_bytes),
                 *([human_bytes(r.saved_bytes_checkpointed or 0)] if ck else []), human_bytes(r.param_bytes),
                 human_bytes(r.grad_bytes)]
        body.append(cells)
    body.append(["total", human_bytes(table.total_saved_bytes),
                 *([human_bytes(table.total_saved_bytes_checkpointed or 0)] if ck else []),
                 human_bytes(table.total_param_bytes), human_bytes(table.total_grad_bytes)])
    th = "".join(f'<th style="text-align:{"left" if i == 0 else "right"};padding:2px 6px">{html.escape(h)}</th>'
                 for i, h in enumerate(head))
    rows = "".join(
        f'<tr class="tlx-memory-row"{" style=font-weight:600" if k == len(body) - 1 else ""}>'
        + "".join(f'<td style="text-align:{"left" if i == 0 else "right"};padding:2px 6px;'
                  f'{"overflow-wrap:anywhere" if i == 0 else "white-space:nowrap"}">{html.escape(c)}</td>'
                  for i, c in enumerate(cells)) + "</tr>"
        for k, cells in enumerate(body))
    kind = "Estimate (weights-free: shapes \u00d7 dtypes)" if table.estimate else "Measured (real tensors)"
    notes = "".join(f'<li>{html.escape(n)}</li>' for n in table.notes)
    return (f'<div class="tlx-memory-table" style="font:12px sans-serif">'
            f'<div style="margin:4px 0">{html.escape(kind)}; {html.escape(loss_text(table.loss))}. "saved": bytes held for the '
            f'backward, each tensor once, parameters excluded{"; ckpt: with activation checkpointing" if ck else ""}.</div>'
            f'<table style="border-collapse:collapse;width:100%"><thead><tr style="border-bottom:1px solid #ccc">{th}'
            f'</tr></thead><tbody>{rows}</tbody></table>'
            f'{f"<ul style=margin:4px 0;padding-left:16px;color:#555>{notes}</ul>" if notes else ""}</div>')


class MemoryPanel(pn.viewable.Viewer):
    """Training memory per layer: the trace's own backward, or a weights-free estimate of a config's step."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        loaded = self.state.loaded
        self._note = pn.pane.HTML("", css_classes=["tlx-memory-note"], sizing_mode="stretch_width")
        self._table = pn.pane.HTML("", sizing_mode="stretch_width", css_classes=["tlx-memory-rows"], visible=False)
        self._plot = pn.pane.Bokeh(None, sizing_mode="stretch_width", css_classes=["tlx-memory-plot"])
        self._plot_box = pn.Column(self._plot, visible=False, sizing_mode="stretch_width", margin=0)  # a Bokeh
        # pane takes its visibility from its figure, so the box around it is what shows or hides
        self._shape = pn.widgets.TextInput(label="batch, sequence", value=DEFAULT_STEP_SHAPE, width=130,
                                           css_classes=["tlx-memory-shape"])
        self._run = pn.widgets.Button(label="Estimate a training step", color="primary",
                                      css_classes=["tlx-memory-run"], align="end")
        self._progress = pn.indicators.Progress(value=0, max=100, sizing_mode="stretch_width", visible=False)
        self.job = BackgroundJob(pn.state.curdoc, lambda _f, text: self._say(text), name="tlx-memory")
        self._run.on_click(lambda _e: self.estimate())
        self.can_estimate = loaded.config_path is not None
        self._controls = pn.Row(self._shape, self._run, visible=self.can_estimate, margin=0)
        self.table: LayerTable | None = None
        if getattr(self.state.trace, "backward", None) is not None:
            self.show(layer_table(self.state.trace), "This trace's own backward:")
        elif self.can_estimate:
            self._say("One training step of this config, weights-free, with and without activation checkpointing: "
                      "pick the batch and sequence length.")
        else:
            self._say(NOTHING)

    def _say(self, text: str) -> None:
        self._note.object = text_html(text)

    def show(self, table: LayerTable, lead: str) -> None:
        """Put `table` in the panel: its rows and the stacked per-layer plot."""
        self.table = table
        self._say(lead)
        self._table.object = table_html(table)
        self._plot.object = memory_bokeh(table, width=370, height=250)
        self._table.visible = self._plot_box.visible = True

    def estimate(self) -> Any:
        """Two weights-free captures of a training step (plain and checkpointed) in the background."""
        try:
            shape = token_shape(parse_shape(self._shape.value))
        except Exception as exc:  # a typed refusal, shown as text
            self._note.object = refusal_html(exc)
            return None
        path = self.state.loaded.config_path

        def work(report: Report) -> LayerTable:
            report(0.0, f"Capturing one training step at {shape[0]}x{shape[1]} tokens, with and without "
                        "checkpointing (weights-free), in a worker process...")
            return memory_isolated(str(path), shape, report)

        thread = self.job.start(work, lambda t: self._done(t, shape), self._failed)
        if thread is not None:
            self._run.disabled = True
            self._progress.param.update(value=-1, visible=True)
        return thread

    def _done(self, table: LayerTable, shape: tuple[int, ...]) -> None:
        self._run.disabled = False
        self._progress.param.update(value=0, visible=False)
        self.show(table, f"One training step at batch {shape[0]}, sequence {shape[1]}:")

    def _failed(self, exc: BaseException) -> None:
        self._run.disabled = False
        self._progress.param.update(value=0, visible=False)
        self._note.object = refusal_html(exc)

    def __panel__(self):
        return pn.Column(self._note, self._controls, self._progress, self._plot_box, self._table, sizing_mode="stretch_width")
