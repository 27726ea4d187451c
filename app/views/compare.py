"""The Compare tab: pick a second side (a dtype or attention-backend twin of the explored model, a
shipped config, or a trace file / config path), diff it against the explored trace in the
background, and show one side's graph coloured by divergence with a legend, both sides' claim
states, the modules sorted by divergence, both values' statistics side by side, and a jump to
the first divergence. A finished comparison also colours the explorer's main graph by divergence
(`ExplorerState.comparison`, drawn by `GraphView`) until "Clear comparison colours". The diff is
`tracer.diff`; colours come from `exporters.diff_overlay`."""
from __future__ import annotations

import html
import math
import time
from typing import Any

import panel as pn
import param

import tracer
from exporters.bokeh_graph import graph_figure
from exporters.diff_overlay import TITLE, diff_caption, divergence_scores, drawn_side, op_notes
from exporters.figures import overlay_fills
from exporters.layout import LayoutEngine
from tracer.configs import shipped_configs
from tracer.differ import TraceDiff, describe_model, twin_traces
from tracer.errors import CompareTwinError, InvalidInputError
from tracer.tensor_stats import tensor_stats

from ..state import ExplorerState
from .docsync import BackgroundJob, Report, refusal_html, text_html
from .graph import hit_test, swatch_html

TWINS = {"bfloat16 twin of this model": "bf16", "float16 twin of this model": "fp16",
         "bitsandbytes int8 twin of this model": "int8",
         "attention sdpa twin": "sdpa", "attention eager twin": "eager"}
PATH_CHOICE = "trace file or config path below"
CONFIG_PREFIX = "shipped config: "
GRAPH_W, GRAPH_H = 360, 520
STATS = ("mean", "std", "min", "max", "norm", "non_finite")
DEFAULT_RTOL = 1e-3


def choices() -> list[str]:
    """What the second side can be, in the order the menu lists them."""
    return [*TWINS, *(CONFIG_PREFIX + name for name in shipped_configs()), PATH_CHOICE]


def second_side(state: ExplorerState, choice: str, path: str, rtol: float) -> tuple[Any, Any, TraceDiff]:
    """(trace a, trace b, their diff) for a menu choice; refusals are typed."""
    loaded = state.loaded
    if choice in TWINS:
        if loaded.model is None:
            raise CompareTwinError("this trace was loaded from a file, so there is no model to build a twin of",
                                   site="Compare tab", remedy="Pick a shipped config or a trace file to compare against.")
        a, b, twin = twin_traces(loaded.model, loaded.inputs, against=TWINS[choice])
        chosen = twin.rtol if twin.rtol is not None and rtol == DEFAULT_RTOL else rtol
        return a, b, tracer.diff(a, b, rtol=chosen, describe_a=describe_model(loaded.model),
                                 describe_b=twin.description)
    from ..sources import open_source

    if choice.startswith(CONFIG_PREFIX):
        other = open_source(choice[len(CONFIG_PREFIX):], None, loaded.input_shape)
    elif choice == PATH_CHOICE:
        if not path.strip():
            raise InvalidInputError("no path given for the second side", site="Compare tab",
                                    remedy="Type a saved trace folder or a config JSON path, then Compare.")
        other = open_source(path.strip(), None, loaded.input_shape)
    else:
        raise CompareTwinError(f"{choice!r} is not a second side this tab knows", site="Compare tab")
    return state.trace, other.trace, tracer.diff(state.trace, other.trace, rtol=rtol, describe_a=loaded.title,
                                                 describe_b=other.title)


class ComparePanel(pn.viewable.Viewer):
    """The Compare tab (see module docstring)."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self.against = pn.widgets.Select(label="Compare against", options=choices(), css_classes=["tlx-compare-against"])
        self.path = pn.widgets.TextInput(placeholder="trace folder or config JSON (for the last choice)",
                                         css_classes=["tlx-compare-path"], sizing_mode="stretch_width")
        self.rtol = pn.widgets.FloatInput(label="tolerance: relative L2", value=DEFAULT_RTOL, start=0.0, step=1e-4,
                                          css_classes=["tlx-compare-rtol"])
        self.run_button = pn.widgets.Button(label="Compare", color="primary", css_classes=["tlx-compare-run"])
        self.jump = pn.widgets.Button(label="Jump to first divergence", disabled=True, css_classes=["tlx-compare-jump"])
        self.clear = pn.widgets.Button(label="Clear comparison colours", disabled=True, css_classes=["tlx-compare-clear"])
        self.note = pn.pane.HTML(text_html("Diff the explored trace against a second side."),
                                 css_classes=["tlx-compare-note"], sizing_mode="stretch_width")
        self.sides = pn.pane.HTML("", css_classes=["tlx-compare-sides"], sizing_mode="stretch_width")
        self.legend = pn.pane.HTML("", css_classes=["tlx-compare-legend"], sizing_mode="stretch_width")
        self.pane = pn.pane.Bokeh(None, css_classes=["tlx-compare-graph"], width=GRAPH_W, min_height=GRAPH_H)
        self.modules = pn.pane.HTML("", css_classes=["tlx-compare-modules"], sizing_mode="stretch_width")
        self.stats = pn.pane.HTML("", css_classes=["tlx-compare-stats"], sizing_mode="stretch_width")
        self.diff: TraceDiff | None = None
        self.traces: tuple[Any, Any] | None = None
        self.engine: LayoutEngine | None = None
        self.expanded: frozenset[str] = frozenset({""})
        self.figure: Any = None
        self.layout: Any = None
        self.recolour_ms = 0.0
        self.job = BackgroundJob(pn.state.curdoc, lambda _f, text: self._say(text), name="tlx-compare")
        self.run_button.on_click(lambda _e: self.run())
        self.jump.on_click(lambda _e: self.jump_to_first())
        self.clear.on_click(lambda _e: self.state.param.update(comparison=None))
        self.state.param.watch(lambda e: setattr(self.clear, "disabled", e.new is None), "comparison")
        self.rtol.param.watch(lambda e: self.set_tolerance(e.new), "value")

    def _say(self, text: str) -> None:
        self.note.object = text_html(text)

    # -- computing -------------------------------------------------------------------------
    def run(self):
        """Compute the diff for the chosen second side in the background."""
        choice, path, rtol = self.against.value, self.path.value or "", float(self.rtol.value or 0.0)

        def work(report: Report):
            report(0.0, f"Comparing against {choice} ...")
            return second_side(self.state, choice, path, rtol)

        thread = self.job.start(work, self.show, self._failed)
        if thread is not None:
            self.run_button.disabled = True
            self.jump.disabled = True
        return thread

    def _failed(self, exc: BaseException) -> None:
        self.run_button.disabled = False
        self.note.object = refusal_html(exc)

    def show(self, result: tuple[Any, Any, TraceDiff]) -> None:
        """Apply a computed (a, b, diff): sides, graph, legend, modules, and the first divergence's statistics."""
        self.run_button.disabled = False
        a, b, diff = result
        self.traces, self.diff = (a, b), diff
        side_trace = b if drawn_side(diff) == "b" else a
        self.engine = LayoutEngine(side_trace)
        self.expanded = frozenset(self.engine.default_expansion())
        self.sides.object = self._sides_html()
        self._draw()
        self._say(diff_caption(diff))
        self._publish()
        self.modules.object = self._modules_html()
        first = self._first_label()
        self.stats.object = self._stats_html(first) if first else ""
        if diff.tolerance.rtol != self.rtol.value:
            self.rtol.value = diff.tolerance.rtol  # a dtype twin suggests its own tolerance
        self.jump.disabled = first is None  # only now: a jump while this ran had its note overwritten

    # -- drawing ---------------------------------------------------------------------------
    def _side(self) -> str:
        return drawn_side(self.diff) if self.diff is not None else "a"

    def _draw(self) -> None:
        trace = self.traces[1] if self._side() == "b" else self.traces[0]
        layout = self.engine.layout(self.expanded, fold_repeats=False)
        self.layout = layout
        fig = graph_figure(layout, trace, caption=None, width=GRAPH_W, height=GRAPH_H)
        self.figure = fig
        self._annotate(fig)
        self._recolour()
        self._attach_tap(fig)
        self.pane.object = fig

    def _recolour(self) -> None:
        """Fill the boxes by divergence beyond the tolerance (the live source is patched in place)."""
        started = time.perf_counter()
        trace = self.traces[1] if self._side() == "b" else self.traces[0]
        scores = divergence_scores(self.diff, self._side(), beyond_only=True)
        fills, legend = overlay_fills(trace, self.layout, scores, "linear", "max")
        source = self.figure.select_one({"name": "nodes"}).data_source
        source.data = {**source.data, "fill": [fills.get(i, "#eeeeee") for i in source.data["id"]]}
        self.legend.object = _legend_html(legend)
        self.recolour_ms = (time.perf_counter() - started) * 1000

    def _publish(self) -> None:
        """Hand the explored side's divergence to the explorer's main graph (`ExplorerState.comparison`),
        which colours by it until cleared."""
        scores = divergence_scores(self.diff, "a", beyond_only=True)
        self.state.comparison = (f"{TITLE}, beyond the tolerance only", scores)

    def _annotate(self, fig: Any) -> None:
        """Each box's hover gains a `diff` line: an op's match, distance or change (both shapes when they
        differ), a module's roll-up."""
        from bokeh.models import HoverTool

        notes = op_notes(self.diff, self._side())
        rollups = self.diff.rollups()
        source = fig.select_one({"name": "nodes"}).data_source
        column = []
        for ident, module in zip(source.data["id"], source.data["module"]):
            if ident in notes:
                column.append(notes[ident])
            else:
                row = rollups.get("" if module == "(root)" else module)
                column.append(row.describe() if row is not None else "")
        source.data = {**source.data, "diff": column}
        for tool in fig.select({"type": HoverTool}):
            tool.tooltips = [*tool.tooltips, ("diff", "@diff")]

    def set_tolerance(self, rtol: float | None) -> None:
        """Judge the diff under a new relative tolerance and recolour (nothing is recomputed from values)."""
        if self.diff is None or self.figure is None or rtol is None or not math.isfinite(rtol) or rtol < 0:
            return
        if math.isclose(float(rtol), self.diff.tolerance.rtol, rel_tol=1e-6, abs_tol=1e-12):
            return  # the browser echoing the value set here (a run's suggested tolerance): nothing to judge again
        self.diff = self.diff.with_tolerance(rtol=float(rtol))
        self._recolour()
        if self.state.comparison is not None:
            self._publish()  # the main graph follows the new tolerance (unless its colours were cleared)
        self.modules.object = self._modules_html()
        self.jump.disabled = self._first_label() is None
        self._say(f"{diff_caption(self.diff)} (recoloured in {self.recolour_ms:.0f} ms)")

    def _attach_tap(self, fig: Any) -> None:
        from bokeh.events import Tap

        fig.on_event(Tap, lambda event: self.inspect_at(event.x, event.y))

    def inspect_at(self, x: float, y: float) -> None:
        hit = hit_test(self.figure, x, y)
        if hit is not None and hit[0] == "node":
            self.stats.object = self._stats_html(str(hit[1].get("id")))

    # -- first divergence --------------------------------------------------------------------
    def _first_label(self) -> str | None:
        """The first divergence on the drawn side, else the first op added, removed or changed."""
        diff = self.diff
        if diff is None:
            return None
        side = self._side()
        first = diff.first_divergence
        if first is not None:
            return first.label_a if side == "a" else first.label_b
        structural = [c for c in diff.changed_ops if not c.dtype_only]
        refs = diff.added_ops if side == "b" else diff.removed_ops
        if refs:
            return refs[0].label
        if structural:
            return structural[0].label_a if side == "a" else structural[0].label_b
        return None

    def jump_to_first(self) -> str:
        """Open the modules around the first divergence, show its statistics, and select it in the explorer."""
        label = self._first_label()
        if label is None:
            self._say("No op parts beyond the tolerance.")
            return ""
        trace = self.traces[1] if self._side() == "b" else self.traces[0]
        op = trace[label]
        parts = op.module.split(".") if op.module else []
        self.expanded = self.expanded | {""} | {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        self._draw()
        self._centre_on(label)
        self.stats.object = self._stats_html(label)
        if self._side() == "a" and label in self.state.trace:
            self.state.select_op(label, keep_tools_open=True)  # the main graph and inspector follow; this tab stays
        self._say(f"First divergence: {label} in {op.module or '(root)'}.")
        return label

    def _centre_on(self, label: str) -> None:
        """Pan the tab's graph so the box drawing op `label` sits in view, a third from the top."""
        try:
            node = self.layout.node_of_op(label)
        except KeyError:
            return
        xr, yr = self.figure.x_range, self.figure.y_range
        span_x, span_y = xr.end - xr.start, yr.start - yr.end  # y is flipped: start is the bottom
        top = node.y - span_y / 3
        yr.update(end=top, start=top + span_y)
        xr.update(start=node.x - span_x / 2, end=node.x + span_x / 2)

    # -- text -------------------------------------------------------------------------------------
    def _sides_html(self) -> str:
        d = self.diff
        rows = "".join(f'<div class="tlx-compare-side" data-side="{k}"><b>{k}</b>: {html.escape(s.description)} '
                       f'&middot; <span class="tlx-compare-state">{html.escape(s.ladder_state)}</span></div>'
                       for k, s in (("a", d.a), ("b", d.b)))
        return f'<div style="font:13px sans-serif">{rows}</div>'

    def _modules_html(self, top: int = 15) -> str:
        rows = self.diff.divergent_modules()[:top]
        if not rows:
            return text_html("No module differs beyond the tolerance.")
        cells = "".join(
            f'<tr class="tlx-compare-module"><td>{html.escape(r.address or "(root)")}</td><td>{html.escape(r.status)}</td>'
            f"<td>{r.ops_diverged}/{r.ops_compared}</td><td>{r.worst_rel_l2:.3g}</td>"
            f'<td>+{r.ops_added} -{r.ops_removed} ~{r.ops_changed}</td></tr>' for r in rows)
        return ('<table style="font:12px sans-serif;border-collapse:collapse"><tr><th>module</th><th>status</th>'
                f"<th>beyond</th><th>worst rel L2</th><th>ops</th></tr>{cells}</table>")

    def _stats_html(self, label: str) -> str:
        """Both sides' statistics of op `label` (on the drawn side) and of its match, side by side."""
        side = self._side()
        a_trace, b_trace = self.traces
        pairs = dict(self.diff.pairs) if side == "a" else {b: a for a, b in self.diff.pairs}
        other = pairs.get(label)
        la, lb = (label, other) if side == "a" else (other, label)
        cols = [_op_stats(a_trace, la), _op_stats(b_trace, lb)]
        head = (f"<tr><th></th><th>a: {html.escape(la or 'none')}</th><th>b: {html.escape(lb or 'none')}</th></tr>")
        keys = ("shape", "dtype", *STATS)
        body = "".join(f"<tr><td>{k}</td><td>{html.escape(str(cols[0].get(k, '')))}</td>"
                       f"<td>{html.escape(str(cols[1].get(k, '')))}</td></tr>" for k in keys)
        return f'<table class="tlx-compare-stats-table" style="font:12px sans-serif">{head}{body}</table>'

    def __panel__(self):
        return pn.Column(self.against, self.path, pn.Row(self.rtol), pn.Row(self.run_button, self.jump), self.clear, self.note,
                         self.sides, self.legend, self.pane, self.stats, self.modules, sizing_mode="stretch_width")


def _op_stats(trace: Any, label: str | None) -> dict[str, Any]:
    if label is None or label not in trace:
        return {}
    op = trace[label]
    out: dict[str, Any] = {"shape": tuple(op.out.shape) if op.out else "", "dtype": op.out.dtype if op.out else ""}
    value = trace.values.get(label)
    if value is not None and hasattr(value, "is_meta") and not value.is_meta:
        stats = tensor_stats(value)
        out.update({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in stats.items() if k in STATS})
    else:
        out["mean"] = "no value saved"
    return out


def _legend_html(legend: dict) -> str:
    stops = "".join(swatch_html(c, v) for v, c in legend.get("stops", []))
    return (f'<div class="tlx-compare-legend-body" style="font:12px sans-serif"><b>{html.escape(TITLE)}</b>, beyond '
            f"the tolerance only<br>{stops}</div>")
