"""The graph view: the nesting-aware layout drawn by `exporters.bokeh_graph`, with zoom-to-fit, pan,
hover, click-to-expand, folding, search, a breadcrumb, a colour legend, and "Colour by" overlays
(`exporters.overlays`: parameters, output bytes, FLOPs, claim state, activation statistics). Drawing and layout live
in `exporters`; one figure lives for the session and a new layout only replaces its sources' data."""
from __future__ import annotations

import contextlib
import html
import logging
import time
from collections import Counter
from typing import Any, Callable

import panel as pn
import param

from exporters import overlays
from exporters.bokeh_graph import READABLE_SCALE, figure_data, graph_figure, view_data, view_source
from exporters.bokeh_overview import follow_view, overview_figure
from exporters.figures import overlay_fills
from exporters.layout.style import FRAME_HEADER, KIND_COLORS, OP_FAMILY_COLORS

from ..state import ExplorerState
from . import ranks
from .actions import PageActions, act_attr
from .docsync import call_on_document

TIMING = logging.getLogger("tlx.timing")  # server-side spans of a click (the app benchmark reads them)
NODE_SOURCE = "tlx-nodes"  # the name given to the node glyphs' data source (tests read it in the browser)


def view_summary(state: ExplorerState) -> str:
    """One line saying what the view shows: boxes by module class, frames, ops, layout time."""
    lay = state.layout
    classes: Counter = Counter()
    ops = 0
    for n in lay.nodes:
        if n.kind == "module" and n.module in state.trace.modules:
            classes[state.trace.modules[n.module].class_name] += 1
        elif n.kind == "module":  # a stretch of a long forward's ops (a span)
            classes["op spans"] += 1
        elif n.kind == "folded":
            cls = state.trace.modules[n.module].class_name if n.module in state.trace.modules else "block"
            classes[f"{cls} (folded x{n.repeat})"] += 1
        elif n.kind in ("op", "io"):
            ops += 1
    parts = [f"{c} \u00d7 {name}" for name, c in classes.most_common()]
    pending = f"; {state.layout_pending}\u2026" if state.layout_pending else ""
    return (f"{len(lay.nodes)} boxes: {ops} ops" + (", " + ", ".join(parts) if parts else "")
            + f"; {len(lay.frames)} open frames; layout {state.layout_ms:.0f} ms{pending}")


def _column(glyph: Any, name: str) -> str | None:
    spec = getattr(glyph, name, None)
    if isinstance(spec, str):
        return spec
    return getattr(spec, "field", None) or (spec.get("field") if isinstance(spec, dict) else None)


def glyph_boxes(renderer: Any) -> list[tuple[float, float, float, float]] | None:
    """(x0, x1, y0, y1) per row of a Rect / Quad / Block renderer in data coordinates, else None."""
    glyph, data = renderer.glyph, renderer.data_source.data
    kind = type(glyph).__name__
    try:
        if kind == "Rect":
            xs, ys = data[_column(glyph, "x")], data[_column(glyph, "y")]
            ws, hs = data[_column(glyph, "width")], data[_column(glyph, "height")]
            return [(x - w / 2, x + w / 2, min(y - h / 2, y + h / 2), max(y - h / 2, y + h / 2))
                    for x, y, w, h in zip(xs, ys, ws, hs)]
        if kind == "Quad":
            ls, rs = data[_column(glyph, "left")], data[_column(glyph, "right")]
            bs, ts = data[_column(glyph, "bottom")], data[_column(glyph, "top")]
            return [(min(l, r), max(l, r), min(b, t), max(b, t)) for l, r, b, t in zip(ls, rs, bs, ts)]
        if kind == "Block":
            xs, ys = data[_column(glyph, "x")], data[_column(glyph, "y")]
            ws, hs = data[_column(glyph, "width")], data[_column(glyph, "height")]
            return [(x, x + w, min(y, y + h), max(y, y + h)) for x, y, w, h in zip(xs, ys, ws, hs)]
    except (KeyError, TypeError):
        return None
    return None


def hit_test(fig: Any, x: float, y: float) -> tuple[str, dict] | None:
    """What a click at data point (x, y) hits: ("node", row) before ("frame", row), smallest first.

    A frame is hit on its header strip only (its label; the chevron that closes it): a click on the
    empty inside of an open frame is a blank click."""
    best: dict[str, tuple[float, dict]] = {}
    for r in fig.renderers:
        src = getattr(r, "data_source", None)
        if src is None or not hasattr(r, "glyph"):
            continue
        cols = src.data
        what = "node" if "id" in cols and "kind" in cols else "frame" if "address" in cols else None
        boxes = glyph_boxes(r) if what else None
        if not boxes:
            continue
        for i, (x0, x1, y0, y1) in enumerate(boxes):
            if x0 <= x <= x1 and y0 <= y <= y1:
                if what == "frame" and y > y0 + FRAME_HEADER:
                    continue
                area = (x1 - x0) * (y1 - y0)
                if what not in best or area < best[what][0]:
                    best[what] = (area, {k: v[i] for k, v in cols.items()})
    for what in ("node", "frame"):
        if what in best:
            return what, best[what][1]
    return None


LEGEND = (("compute (linear, matmul, conv, attention)", OP_FAMILY_COLORS["compute"]),
          ("norm", OP_FAMILY_COLORS["norm"]), ("activation", OP_FAMILY_COLORS["activation"]),
          ("arithmetic", OP_FAMILY_COLORS["arith"]), ("shape / view", OP_FAMILY_COLORS["shape"]),
          ("constant", OP_FAMILY_COLORS["constant"]), ("module (click to open)", KIND_COLORS["module"]),
          ("folded blocks", KIND_COLORS["folded"]), ("input / output", KIND_COLORS["io"]))


def swatch_html(colour: str, text: object = "") -> str:
    """One legend entry: a colour square, then `text` (escaped)."""
    return (f'<span class="tlx-legend-item" style="white-space:nowrap;margin-right:8px"><span style="display:'
            f'inline-block;width:11px;height:11px;background:{colour};border:1px solid #555;vertical-align:-1px;'
            f'margin-right:3px"></span>{html.escape(str(text))}</span> ')


def legend_html(trace: Any = None) -> str:
    """The colour legend: one swatch per box colour the graph uses (collectives too for a sharded `trace`)."""
    items = "".join(swatch_html(c, name) for name, c in LEGEND) + ranks.legend_extra(trace)
    return f'<div class="tlx-legend" style="font:12px sans-serif;color:#333;line-height:18px">{items}</div>'


OP_KIND = "op kind"  # the default colouring: boxes by op family, the legend above
COMPARE = "compare"  # colour by the Compare tab's finished comparison (`ExplorerState.comparison`)
COMPARE_LABEL = "divergence (Compare)"


def overlay_choices(trace: Any) -> dict[str, str]:
    """The "Colour by" menu: op kind, then every overlay this trace offers (label -> overlay name)."""
    return {OP_KIND: OP_KIND, **{overlays.TITLES.get(n, n): n for n in overlays.available(trace)}}


def overlay_legend_html(legend: dict, tail: str = "") -> str:
    """An overlay's legend: its title, then its colour stops (numbers) or categories (claim states),
    then `tail` (markup, e.g. a link that clears it)."""
    rows = legend.get("stops") or legend.get("items") or []
    items = "".join(swatch_html(c, v) for v, c in rows)
    title = html.escape(str(legend.get("title", "")))
    return (f'<div class="tlx-legend tlx-overlay-legend" style="font:12px sans-serif;color:#333;line-height:18px">'
            f'<b>{title}</b>: {items}{swatch_html(overlays.NO_VALUE, "no value")}{tail}</div>')


def breadcrumb_steps(state: ExplorerState) -> list[tuple[str, str]]:
    """The open path as (text, action) steps: root class ("module:" shows the whole graph), module
    path segments ("module:ADDRESS"), then the selected op ("op:LABEL")."""
    trace = state.trace
    root = trace.modules[""].class_name if "" in trace.modules else trace.model_class
    tail: list[tuple[str, str]] = []
    address = state.focused
    if state.selected and state.selected in trace:
        address, tail = trace[state.selected].module, [(state.selected, f"op:{state.selected}")]
    elif not address and state.centre_on.startswith("module:"):
        address = state.centre_on.partition(":")[2]
    steps, parts = [(root, "module:")], address.split(".") if address else []
    i = 0
    while i < len(parts):  # "layers.3" reads as one step: a numbered child joins its container
        step = parts[i]
        if i + 1 < len(parts) and parts[i + 1].isdigit():
            step, i = f"{step}.{parts[i + 1]}", i + 1
        steps.append((step, "module:" + ".".join(parts[:i + 1])))
        i += 1
    return steps + tail


def breadcrumb(state: ExplorerState) -> list[str]:
    """The open path shown above the graph: root class, module path segments, then the selected op."""
    return [text for text, _ in breadcrumb_steps(state)]


TOOL_LINK = 'class="tlx-tool-link" style="color:#1f4f8a;cursor:pointer;margin-left:10px;white-space:nowrap"'


def breadcrumb_html(state: ExplorerState) -> str:
    """The breadcrumb (each step clickable), then Expand all / Collapse all at the right."""
    sep = ' <span style="color:#999">\u203a</span> '
    body = sep.join(f'<span class="tlx-crumb" {act_attr(*act.split(":", 1))} style="cursor:pointer">{html.escape(text)}</span>'
                    for text, act in breadcrumb_steps(state))
    scope = "under " + state.focused.rsplit(".", 1)[-1] if state.focused else "modules"
    tools = (f'<span {TOOL_LINK} {act_attr("view", "expand-all")} title="open every module {html.escape(scope)}">'
             f'Expand all</span><span {TOOL_LINK} {act_attr("view", "collapse-all")}>Collapse all</span>')
    return (f'<div style="display:flex;font:13px sans-serif"><div class="tlx-breadcrumb" style="flex:1 1 auto;'
            f'white-space:nowrap;overflow:hidden;text-overflow:ellipsis">{body}</div><div style="flex:none">{tools}</div></div>')


class GraphView(pn.viewable.Viewer):
    """The drawn graph plus its toolbar (search, fold, fit, default view), the breadcrumb, the status
    line (what is drawn, what the last action did) and the colour legend."""

    state = param.ClassSelector(class_=ExplorerState)
    width = param.Integer(default=900, doc="the figure's nominal size (the page stretches it)")
    height = param.Integer(default=640)

    def __init__(self, **params):
        super().__init__(**params)
        self.search = pn.widgets.TextInput(placeholder="search an op label or module path, then Enter",
                                           css_classes=["tlx-search"], width=300, value=self.state.query)
        self.fold = pn.widgets.Checkbox(label="fold repeated blocks", value=self.state.fold_repeats, css_classes=["tlx-fold"])
        self.fit = pn.widgets.Button(label="Fit", css_classes=["tlx-fit"], width=60)
        self.reset = pn.widgets.Button(label="Default view", css_classes=["tlx-reset"], width=110)
        self.crumbs = pn.pane.HTML(breadcrumb_html(self.state), css_classes=["tlx-crumbs"], sizing_mode="stretch_width", margin=(0, 10))
        self.summary = pn.pane.HTML(self._summary_html(), css_classes=["tlx-view-summary"], sizing_mode="stretch_width", margin=(0, 10))
        self.legend = pn.pane.HTML(legend_html(self.state.trace), sizing_mode="stretch_width", margin=(0, 10), css_classes=["tlx-legend-pane"])
        self.colour_by = pn.widgets.Select(options=overlay_choices(self.state.trace), value=OP_KIND, width=170,
                                           css_classes=["tlx-overlay"], name="")
        self.overlay_scale = pn.widgets.Select(options=list(overlays.SCALES), value="linear", width=80,
                                               css_classes=["tlx-overlay-scale"], name="")
        self.overlay_rollup = pn.widgets.Select(options=list(overlays.ROLLUPS), value="sum", width=70,
                                                css_classes=["tlx-overlay-rollup"], name="")
        self._view_seq = 0
        self._status_pending = False
        self._overview: tuple[Any, Any] | None = None  # (pane, fit source), made on first use
        self._in_event = False  # handling a page event: the document is ours, changes apply at once
        self._before_compare = OP_KIND  # the colouring a cleared comparison returns to
        # no caption and no save button: the banner above states the claim, and the Export tab's figures carry
        # it as their caption (a canvas saved from the toolbar would not; issue 36 item 4: said once on screen)
        self.figure = graph_figure(self.state.layout, self.state.trace, width=self.width, height=self.height,
                                   sizing_mode="stretch_both", save=False)
        self._name_sources(self.figure)
        follow_view(self.figure)  # the overview, added after the first paint, shows this view
        named = {r.name: r for r in [*self.figure.renderers, *self.figure.center] if r.name}  # no model walk
        self._sources = {name: named[name] for name in ("frames", "edges", "nodes")}
        self._arrows = named["arrows"]
        self._view = view_source(self.figure)
        self._attach_tap(self.figure)
        ranks.attach(self)  # a sharded trace: collective nodes, placements in the hover (issue 16)
        self._attach_keys(self.figure)
        self._view.data = self._fit_data(self._target_box())
        self.pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_both", min_height=240, css_classes=["tlx-graph"])
        self.search.param.watch(self._on_search, "enter_pressed")
        self.fold.param.watch(lambda e: setattr(self.state, "fold_repeats", e.new), "value")
        self.state.param.watch(lambda _e: self._soon(self._sync_fold), "fold_repeats")
        self.fit.on_click(lambda *_e: self._soon(self._fit_all))
        self.reset.on_click(self._on_reset)
        for w in (self.colour_by, self.overlay_scale, self.overlay_rollup):
            w.param.watch(lambda *_e: self.redraw(), "value")
        self.colour_by.param.watch(lambda *_e: self._offer_scales(), "value")
        self._offer_scales()
        self.state.param.watch(lambda *_e: self.redraw(), ["layout"])
        self.state.param.watch(lambda *_e: self._soon(self._highlight), ["selected"])
        self.state.param.watch(self._on_centre, ["centre_on"])
        self.state.param.watch(lambda e: self._on_comparison(e.new), ["comparison"])
        self.state.param.watch(lambda *_e: self._restatus(), ["message", "focused", "selected", "layout_pending"])
        self._highlight()

    # -- drawing ----------------------------------------------------------------------
    def redraw(self) -> None:
        """Put the current layout into the live figure's sources and fit the view to what changed."""
        started = time.perf_counter()
        data = figure_data(self.state.layout, self.state.trace)
        ranks.decorate_nodes(data["nodes"], self.state.trace)  # issue 16: before the overlay recolours
        legend = self._overlay(data)
        box = self._target_box()
        TIMING.debug("figure_data %.2f ms", (time.perf_counter() - started) * 1000)

        def apply() -> None:
            begun = time.perf_counter()
            with pn.io.hold():
                for name, src in self._sources.items():
                    src.data_source.data = data[name]
                self._arrows.source.data = data["arrows"]
                self._view.data = self._fit_data(box)
                self._refit_overview()
                self._highlight()
                if self.legend.object != legend:
                    self.legend.object = legend
            self._restatus()
            TIMING.debug("apply %.2f ms", (time.perf_counter() - begun) * 1000)

        self._soon(apply)

    def _offer_scales(self) -> None:
        """The scale and roll-up menus act on a value overlay only: greyed out while the boxes are coloured
        by op kind or by a comparison (whose scale is fixed), so no menu offers a choice that does nothing."""
        fixed = self.colour_by.value in (OP_KIND, COMPARE)
        for menu in (self.overlay_scale, self.overlay_rollup):
            menu.disabled = fixed

    def _overlay(self, data: dict) -> str:
        """Recolour the node rows by the chosen overlay (modules rolled up); the legend that explains them."""
        name = self.colour_by.value
        if name == OP_KIND or (name == COMPARE and self.state.comparison is None):
            return legend_html(self.state.trace)
        if name == COMPARE:
            return self._compare_overlay(data)
        fills, legend = overlay_fills(self.state.trace, self.state.layout, name, self.overlay_scale.value,
                                      self.overlay_rollup.value)
        nodes = data["nodes"]
        nodes["fill"] = [fills.get(i, overlays.NO_VALUE) for i in nodes["id"]]
        return overlay_legend_html(legend)

    def _compare_overlay(self, data: dict) -> str:
        """Recolour the node rows by the comparison's divergence (a module by its worst op); its legend
        ends with a link that clears the comparison colours."""
        title, scores = self.state.comparison
        trace = self.state.trace
        fills, legend = overlay_fills(trace, self.state.layout, {k: v for k, v in scores.items() if k in trace},
                                      "linear", "max")
        nodes = data["nodes"]
        nodes["fill"] = [fills.get(i, overlays.NO_VALUE) for i in nodes["id"]]
        clear = f'<span {TOOL_LINK} {act_attr("view", "clear-compare")}>Clear comparison colours</span>'
        return overlay_legend_html({**legend, "title": f"{title} · modules: worst op"}, tail=clear)

    def _on_comparison(self, comparison: Any) -> None:
        """A finished comparison selects "Colour by: divergence" (the colouring before it is kept); a
        cleared one removes that choice and returns to the colouring before it."""
        if comparison is not None:
            self.colour_by.options = {**overlay_choices(self.state.trace), COMPARE_LABEL: COMPARE}
            if self.colour_by.value == COMPARE:
                self.redraw()  # a new comparison or tolerance: same choice, new colours
            else:
                self._before_compare = self.colour_by.value
                self.colour_by.value = COMPARE
            return
        back = self._before_compare if self.colour_by.value == COMPARE else self.colour_by.value
        self.colour_by.value = back
        self.colour_by.options = overlay_choices(self.state.trace)
        self.state.message = "Comparison colours cleared."

    def overview(self) -> Any:
        """The minimap pane: the whole graph small, the main view's rectangle on it (click or drag it to pan)."""
        if self._overview is None:
            lay = self.state.layout
            fig, fit = overview_figure(self.figure, (lay.width, lay.height))
            pane = pn.pane.Bokeh(fig, height=150, sizing_mode="stretch_width", margin=(4, 5), css_classes=["tlx-overview"])
            self._overview = (pane, fit)
        return self._overview[0]

    def _refit_overview(self) -> None:
        """Fit the minimap to a layout of a new size (it draws from the main figure's sources already)."""
        if self._overview is None:
            return
        lay, fit = self.state.layout, self._overview[1]
        if fit.data["x1"] != [lay.width] or fit.data["y1"] != [lay.height]:
            fit.data = view_data((0.0, 0.0, lay.width, lay.height), max_scale=1e9)

    def _soon(self, fn: Callable[[], Any]) -> None:
        """Apply `fn` to the page: at once while handling a page event (inside `_one_message`), else on the
        document's next tick (a change may come from another thread)."""
        if self._in_event:
            fn()
        else:
            self._on_document(fn)

    def _on_document(self, fn: Callable[[], Any]) -> None:
        """Run a change to live Bokeh models under its document's lock (the next tick) when served: the session's
        document its state is bound to (`ExplorerState.document`), never whatever `pn.state.curdoc` reads now
        (it falls back to Bokeh's process-wide patched document, which another thread's server sets)."""
        call_on_document(self.state.document, fn)

    @contextlib.contextmanager
    def _one_message(self):
        """Handle a page event so that everything it changes (graph data, status, URL, inspector) reaches
        the page as one message, not one per change on later ticks."""
        if self._in_event:
            yield
            return
        self._in_event = True
        try:
            with pn.io.hold():
                yield
                if self._status_pending:
                    self._write_status()
        finally:
            self._in_event = False
            if self._status_pending:  # the event failed before its status was written
                self._on_document(self._write_status)

    def _fit_data(self, box: tuple[float, float, float, float]) -> dict[str, list]:
        """The view source's data for showing `box`: never below the readable zoom (issue 36), so a box
        too big for the window shows its top at readable labels rather than all of it as blank boxes."""
        return view_data(box, self._next_seq(), min_scale=READABLE_SCALE)

    def _next_seq(self) -> int:
        self._view_seq += 1
        return self._view_seq

    def _target_box(self) -> tuple[float, float, float, float]:
        """What the view fits after a change: an opened frame, a selected op at 100 %, or the whole graph
        (a collapsed module shows its parent frame, or the whole graph at the top level)."""
        lay, target = self.state.layout, self.state.centre_on
        whole = (0.0, 0.0, lay.width, lay.height)
        kind, _, ident = target.partition(":")
        if kind == "op":
            try:
                n = lay.node_of_op(ident)
            except KeyError:
                return whole
            return n.bounds
        if kind == "module" and ident:
            frames = {f.address: f for f in lay.frames}
            if ident not in frames and "." in ident:  # collapsed: show the frame it sits in
                ident = ident.rsplit(".", 1)[0]
                while ident and ident not in frames:
                    ident = ident.rsplit(".", 1)[0] if "." in ident else ""
            f = frames.get(ident)
            if f is not None and ident:
                return (f.x0 - 8, f.y0 - 8, f.x1 + 8, f.y1 + 8)
        return whole

    def _sync_fold(self) -> None:
        """Show the state's folding on the checkbox: read when applied, not from the event, since a view refused
        after (un)folding puts the folding back inside that event (issue 39); on the next tick when served,
        so that the page's checkbox, which sent the change, is told the value it returned to."""
        if self.fold.value != self.state.fold_repeats:
            self.fold.value = self.state.fold_repeats

    def _fit_all(self) -> None:
        lay = self.state.layout
        self._view.data = self._fit_data((0.0, 0.0, lay.width, lay.height))
        self.state.message = "Fitted the graph to the window at a readable size (a bigger graph shows its top: pan or use the overview)."

    @staticmethod
    def _name_sources(fig: Any) -> None:
        for r in fig.renderers:
            src = getattr(r, "data_source", None)
            if src is not None and "id" in src.data and "kind" in src.data:
                src.name = NODE_SOURCE

    def _node_source(self) -> Any:
        return self._sources["nodes"].data_source

    def _on_centre(self, _event) -> None:
        """Move the view to a search hit even when nothing had to open (a new layout moves it itself)."""
        before = self.state.layout

        def move() -> None:
            if self.state.layout is before:
                self._view.data = self._fit_data(self._target_box())

        self._soon(move)

    def _highlight(self) -> None:
        """The selected op's box and its input and output neighbours' boxes stay bright; the rest dims."""
        src = self._node_source()
        lay, trace = self.state.layout, self.state.trace
        indices: list[int] = []
        if self.state.selected and self.state.selected in trace:
            visible = getattr(lay, "visible", {}) or {}
            label = self.state.selected
            near = [label, *(e.source for e in trace[label].parents), *trace.children_of(label)]
            rows = {ident: i for i, ident in enumerate(src.data.get("id", []))}
            indices = sorted({rows[t] for t in (visible.get(x, x) for x in near) if t in rows})
        src.selected.indices = indices

    def _summary_html(self) -> str:
        """One line, never wrapping (the graph below keeps its height): the last action first, then what
        is drawn; the whole text is the line's tooltip."""
        summary = view_summary(self.state)
        note = f'<span class="tlx-last-action" style="color:#1f4f8a">{html.escape(self.state.message)}</span> &middot; ' \
            if self.state.message else ""
        whole = html.escape(f"{self.state.message} \u00b7 {summary}" if self.state.message else summary, quote=True)
        return (f'<div class="tlx-summary-text" title="{whole}" style="font-size:13px;font-family:sans-serif;'
                f'white-space:nowrap;overflow:hidden;text-overflow:ellipsis">{note}{html.escape(summary)}</div>')

    def _restatus(self) -> None:
        """Rewrite the status line and breadcrumb once per tick (or once at the end of a page event),
        however many changes asked for it."""
        if self._status_pending:
            return
        self._status_pending = True
        if not self._in_event:
            self._on_document(self._write_status)

    def _write_status(self) -> None:
        self._status_pending = False
        self.summary.object = self._summary_html()
        self.crumbs.object = breadcrumb_html(self.state)

    # -- interaction ----------------------------------------------------------------------
    def _attach_tap(self, fig: Any) -> None:
        from bokeh.events import Tap
        from bokeh.models import CustomJS, TapTool

        if not any(isinstance(t, TapTool) for t in fig.tools):
            fig.add_tools(TapTool())
        fig.on_event(Tap, lambda event: self._clicked(event.x, event.y))
        # when Bokeh recognised the tap, in page time (the app benchmark splits click-to-paint with it)
        fig.js_on_event(Tap, CustomJS(code="window.__tlx_tap = performance.now();"))

    def _attach_keys(self, fig: Any) -> None:
        """Esc clears the selection; clicks on data-tlx-act markup (tree, breadcrumb, inspector) reach
        `self.actions` (a page listener installed with the figure)."""
        self.actions = PageActions(on_escape=lambda: self.clear_selection("Esc"))
        self.actions.install(fig)
        self.actions.on("op", self._go_op)
        self.actions.on("view", self._view_action)
        self.actions.on("module", self._go_module)

    def _go_op(self, label: str) -> None:
        if label in self.state.trace:
            self.state.select_op(label)
            self.state.message = f"Op {label} selected."

    def _go_module(self, address: str) -> None:
        if not address or address in self.state.trace.modules:
            self.state.show_module(address)

    def _view_action(self, what: str) -> None:
        if what == "expand-all":
            self.state.expand_all()
        elif what == "collapse-all":
            self.state.collapse_all()
        elif what == "clear-compare":
            self.state.comparison = None

    def clear_selection(self, how: str = "blank click") -> None:
        """Drop the selected op and focused module (Esc, or a click on empty canvas)."""
        had = bool(self.state.selected or self.state.focused)
        self.state.param.update(selected="", focused="")
        self.state.message = "Selection cleared." if had else f"Nothing selected ({how})."

    def _clicked(self, x: float, y: float) -> None:
        started = time.perf_counter()
        with self._one_message():
            self.state.message = f"Click: {self.click(x, y)}."  # what it did, not where (layout units mean nothing to a reader)
        TIMING.debug("click %.2f ms (layout %.2f ms)", (time.perf_counter() - started) * 1000, self.state.layout_ms)

    def click(self, x: float, y: float) -> str:
        """Act on a click at data point (x, y): expand/collapse a module, unfold, inspect an op, or
        (on empty canvas) clear the selection."""
        hit = hit_test(self.figure, x, y) if self.figure is not None else None
        if hit is None or (hit[0] == "frame" and not str(hit[1]["address"])):
            self.state.param.update(selected="", focused="")
            return "nothing there, selection cleared"
        what, row = hit
        if what == "frame":
            self.state.toggle(str(row["address"]), int(row.get("call", 0)))
            return f"collapsed {row['address']}"
        kind, ident = str(row.get("kind")), str(row.get("id"))
        if kind == "module":
            address = ident.removeprefix("mod:").split(":", 1)[0]  # `mod:block:2` is call 2 of `block`
            call = ident.removeprefix(f"mod:{address}").removeprefix(":")
            self.state.toggle(address, int(call) if call.isdigit() else 0)
            return f"expanded {row.get('module')}"
        if kind == "folded":
            self.state.toggle(str(row.get("module") or ident.removeprefix("fold:")))
            return f"unfolded {row.get('module')}"
        if ident in self.state.trace:
            self.state.param.update(selected=ident, focused=self.state.trace[ident].module)
            return f"selected {ident}"
        return "nothing"

    def _on_search(self, _event) -> None:
        query = self.search.value_input or self.search.value
        if query and query.strip():
            with self._one_message():
                self.state.go(query)

    def _on_reset(self, _event) -> None:
        self.state.centre_on = ""
        self.state.expanded = frozenset(self.state.engine.default_expansion())
        self.state.message = "Default view."

    def __panel__(self):
        colour = pn.Row(pn.pane.HTML('<span style="font:12px sans-serif;line-height:32px">Colour by</span>', margin=(0, 2)),
                        self.colour_by, self.overlay_scale, self.overlay_rollup, self.legend, margin=0,
                        sizing_mode="stretch_width")
        return pn.Column(pn.Row(self.search, self.fold, self.fit, self.reset, margin=(0, 5)), self.crumbs,
                         self.summary,
                         self.pane, colour, sizing_mode="stretch_both", css_classes=["tlx-centre"])
