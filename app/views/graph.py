"""The graph view: the nesting-aware layout drawn by `exporters.bokeh_graph`, with zoom, pan,
hover, click-to-expand, folding and search. Drawing and layout live in `exporters`."""
from __future__ import annotations

import html
from collections import Counter
from typing import Any, Callable

import panel as pn
import param

from ..ladder import caption
from exporters.bokeh_graph import graph_figure

from ..state import ExplorerState
from .docsync import call_on_document

NODE_SOURCE = "tlx-nodes"  # the name given to the node glyphs' data source (tests read it in the browser)


def view_summary(state: ExplorerState) -> str:
    """One line saying what the view shows: boxes by module class, frames, ops, layout time."""
    lay = state.layout
    classes: Counter = Counter()
    ops = 0
    for n in lay.nodes:
        if n.kind == "module" and n.module in state.trace.modules:
            classes[state.trace.modules[n.module].class_name] += 1
        elif n.kind == "folded":
            cls = state.trace.modules[n.module].class_name if n.module in state.trace.modules else "block"
            classes[f"{cls} (folded x{n.repeat})"] += 1
        elif n.kind in ("op", "io"):
            ops += 1
    parts = [f"{c} \u00d7 {name}" for name, c in classes.most_common()]
    return (f"{len(lay.nodes)} boxes: {ops} ops" + (", " + ", ".join(parts) if parts else "")
            + f"; {len(lay.frames)} open frames; layout {state.layout_ms:.0f} ms")


def renderer_sources(fig: Any) -> list[Any]:
    """Every data source the figure draws from, in a stable order (renderers, then annotations)."""
    found = []
    for r in fig.renderers:
        src = getattr(r, "data_source", None)
        if src is not None:
            found.append(src)
    for place in ("center", "above", "below", "left", "right"):
        for a in getattr(fig, place, []) or []:
            src = getattr(a, "source", None)
            if src is not None:
                found.append(src)
    return found


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
    """What a click at data point (x, y) hits: ("node", row) before ("frame", row), smallest first."""
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
                area = (x1 - x0) * (y1 - y0)
                if what not in best or area < best[what][0]:
                    best[what] = (area, {k: v[i] for k, v in cols.items()})
    for what in ("node", "frame"):
        if what in best:
            return what, best[what][1]
    return None


def on_document(fn: Callable[[], Any]) -> None:
    """Run a change to live Bokeh models under the current document's lock (next tick) when served."""
    call_on_document(pn.state.curdoc, fn)


class GraphView(pn.viewable.Viewer):
    """The drawn graph plus its toolbar (search, fold, reset) and a one-line view summary."""

    state = param.ClassSelector(class_=ExplorerState)
    width = param.Integer(default=900)
    height = param.Integer(default=720)

    def __init__(self, **params):
        super().__init__(**params)
        self.search = pn.widgets.TextInput(placeholder="search an op label or module path, then Enter",
                                           css_classes=["tlx-search"], width=320)
        self.fold = pn.widgets.Checkbox(label="fold repeated blocks", value=self.state.fold_repeats, css_classes=["tlx-fold"])
        self.reset = pn.widgets.Button(label="Default view", css_classes=["tlx-reset"])
        self.summary = pn.pane.HTML(self._summary_html(), css_classes=["tlx-view-summary"], sizing_mode="stretch_width")
        self.pane = pn.pane.Bokeh(None, sizing_mode="stretch_width", min_height=self.height, css_classes=["tlx-graph"])
        self.figure: Any = None
        self.search.param.watch(self._on_search, "value")
        self.fold.param.watch(lambda e: setattr(self.state, "fold_repeats", e.new), "value")
        self.reset.on_click(self._on_reset)
        self.state.param.watch(lambda _e: self.redraw(), ["layout", "ladder"])
        self.state.param.watch(lambda _e: on_document(self._highlight), "selected")
        self.redraw()

    # -- drawing ----------------------------------------------------------------------
    def redraw(self) -> None:
        """Draw the current layout; reuse the live figure's sources when the shape allows."""
        self.summary.object = self._summary_html()
        fig = graph_figure(self.state.layout, self.state.trace, caption=caption(self.state.trace),
                               width=self.width, height=self.height)
        self._name_sources(fig)
        if self.figure is not None and self._same_shape(fig):
            on_document(lambda: (self._patch(fig), self._centre(fig), self._highlight()))
            return
        self.figure = fig
        self._attach_tap(fig)
        self._highlight()
        self.pane.object = fig

    def _centre(self, fig: Any) -> None:
        """Keep the zoom of a fresh fit, centred on the module just toggled (frame or box)."""
        lay, target = self.state.layout, self.state.centre_on
        if not target or lay is None:
            return
        kind, _, ident = target.partition(":")
        frame = next((f for f in lay.frames if f.address == ident), None) if kind == "module" else None
        if frame is not None:
            cy = frame.y0
        else:
            try:
                node = lay.node_of_op(ident) if kind == "op" else next(
                    n for n in lay.nodes if n.module == ident and n.kind in ("module", "folded"))
            except (KeyError, StopIteration):
                return
            cy = node.y - (3 * node.height if kind == "op" else node.height)
        xr, yr = self.figure.x_range, self.figure.y_range
        span_x, span_y = fig.x_range.end - fig.x_range.start, fig.y_range.start - fig.y_range.end
        if span_y <= 0 or span_x <= 0:
            return
        visible_y = min(span_y, span_x * self.height / max(self.width, 1))  # the part of a tall layout on screen
        top = max(cy - visible_y * 0.15, fig.y_range.end)
        yr.update(end=top, start=top + span_y)
        xr.update(start=fig.x_range.start, end=fig.x_range.end)

    def _same_shape(self, fig: Any) -> bool:
        glyphs = [type(r.glyph) for r in self.figure.renderers if hasattr(r, "glyph")]
        return (len(renderer_sources(self.figure)) == len(renderer_sources(fig))
                and glyphs == [type(r.glyph) for r in fig.renderers if hasattr(r, "glyph")])

    def _patch(self, fig: Any) -> None:
        """Move the new figure's data into the live one (Bokeh sends only the changed sources)."""
        old, new = renderer_sources(self.figure), renderer_sources(fig)
        for a, b in zip(old, new):
            a.data = dict(b.data)
        for rng in ("x_range", "y_range"):
            src, dst = getattr(fig, rng), getattr(self.figure, rng)
            if hasattr(src, "start") and hasattr(dst, "start"):
                dst.update(start=src.start, end=src.end)
                if hasattr(dst, "bounds") and hasattr(src, "bounds"):
                    dst.bounds = src.bounds
        if fig.title is not None and self.figure.title is not None:
            self.figure.title.text = fig.title.text
        for a, b in zip(self.figure.below, fig.below):
            if hasattr(a, "text") and hasattr(b, "text"):
                a.text = b.text

    @staticmethod
    def _name_sources(fig: Any) -> None:
        for r in fig.renderers:
            src = getattr(r, "data_source", None)
            if src is not None and "id" in src.data and "kind" in src.data:
                src.name = NODE_SOURCE

    def _node_source(self) -> Any:
        for r in (self.figure.renderers if self.figure is not None else []):
            src = getattr(r, "data_source", None)
            if src is not None and src.name == NODE_SOURCE:
                return src
        return None

    def _highlight(self) -> None:
        src = self._node_source()
        lay = self.state.layout
        if src is None or lay is None:
            return
        target = None
        if self.state.selected:
            visible = getattr(lay, "visible", {}) or {}
            target = visible.get(self.state.selected, self.state.selected)
        ids = list(src.data.get("id", []))
        src.selected.indices = [ids.index(target)] if target in ids else []

    def _summary_html(self) -> str:
        note = f' <span class="tlx-last-action" style="color:#666">&middot; {html.escape(self.state.message)}</span>' \
            if self.state.message else ""
        return f'<div class="tlx-summary-text" style="font-size:13px">{html.escape(view_summary(self.state))}{note}</div>'

    # -- interaction ----------------------------------------------------------------------
    def _attach_tap(self, fig: Any) -> None:
        from bokeh.events import Tap
        from bokeh.models import TapTool

        if not any(isinstance(t, TapTool) for t in fig.tools):
            fig.add_tools(TapTool())
        fig.on_event(Tap, lambda event: self._clicked(event.x, event.y))

    def _clicked(self, x: float, y: float) -> None:
        self.state.message = f"click at ({x:.0f}, {y:.0f}): {self.click(x, y)}"
        self.summary.object = self._summary_html()

    def click(self, x: float, y: float) -> str:
        """Act on a click at data point (x, y): expand/collapse a module, unfold, or inspect an op."""
        hit = hit_test(self.figure, x, y) if self.figure is not None else None
        if hit is None:
            return "nothing"
        what, row = hit
        if what == "frame":
            self.state.toggle(str(row["address"]))
            return f"collapsed {row['address']}"
        kind, ident = str(row.get("kind")), str(row.get("id"))
        if kind == "module":
            self.state.toggle(str(row.get("module") or ident.removeprefix("mod:")))
            return f"expanded {row.get('module')}"
        if kind == "folded":
            self.state.toggle(str(row.get("module") or ident.removeprefix("fold:")))
            return f"unfolded {row.get('module')}"
        if ident in self.state.trace:
            self.state.selected = ident
            self.state.focused = self.state.trace[ident].module
            return f"selected {ident}"
        return "nothing"

    def _on_search(self, event) -> None:
        if event.new:
            self.state.go(event.new)

    def _on_reset(self, _event) -> None:
        self.state.expanded = frozenset(self.state.engine.default_expansion())

    def __panel__(self):
        return pn.Column(pn.Row(self.search, self.fold, self.reset), self.summary, self.pane,
                         sizing_mode="stretch_width")
