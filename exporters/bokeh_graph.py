"""A Bokeh figure of a layout: module frames, boxes coloured by kind, edges with arrowheads, hover.

Renderers are named so an app can find them with `fig.select(name=...)`: "frames", "edges",
"arrows", "nodes" (its data source has id, kind, label, module, shape, dtype, params), "labels".
The y axis is flipped so layout coordinates (y down) are used as they are.
"""
from __future__ import annotations

from typing import Any

from tracer.ir import Trace

from .layout import Layout, LayoutNode, group_tree
from .layout.groups import GroupTree
from .layout.style import EDGE, FONT_FAMILY, FONT_SIZE, HEADER_CHAR_W, edge_colors, fill_color, ladder_caption, op_family, shape_text

NODE_COLUMNS = ("id", "kind", "label", "module", "shape", "dtype", "params", "n_params", "op_kind", "repeat", "fill")
HOVER_FIELDS = (("label", "@label"), ("module", "@module"), ("shape", "@shape"), ("dtype", "@dtype"),
                ("params", "@params"))


def caption_for(trace: Trace) -> str:
    """The ladder-state caption: e.g. "HYPOTHESIS: shapes unproven, no values exist (weights-free capture)"."""
    return ladder_caption(trace.ladder_state)


def coords(values: Any) -> Any:
    """Layout coordinates as a float array rounded to 0.1 unit: sent to the browser as one binary buffer
    (no per-number JSON text to write and parse), and no digits nobody can see."""
    import numpy as np

    return np.round(np.asarray(values, dtype=np.float64), 1)


def node_table(layout: Layout, trace: Trace) -> dict[str, Any]:
    """Column data for the node glyphs (one row per layout node, in layout order; x, y, w, h as arrays)."""
    cols: dict[str, list[Any]] = {c: [] for c in (*NODE_COLUMNS, "x", "y", "w", "h")}
    tree = layout.groups if layout.groups is not None else group_tree(trace)
    for n in layout.nodes:
        row = _node_row(n, trace, tree)
        for c in NODE_COLUMNS:
            cols[c].append(row[c])
        cols["x"].append(n.x)
        cols["y"].append(n.y)
        cols["w"].append(n.width)
        cols["h"].append(n.height)
    for c in ("x", "y", "w", "h"):
        cols[c] = coords(cols[c])
    return cols


def _node_row(n: LayoutNode, trace: Trace, tree: GroupTree) -> dict[str, Any]:
    row = {"id": n.id, "kind": n.kind, "label": n.label, "module": n.module or "(root)", "repeat": n.repeat,
           "op_kind": "", "shape": "", "dtype": "", "params": "", "n_params": 0}
    if n.kind in ("op", "io") and n.op_label:
        op = trace[n.op_label]
        row["op_kind"] = op.kind
        if op.out is not None:
            row["shape"], row["dtype"] = shape_text(op.out.shape), op.out.dtype
        row["params"] = ", ".join(op.params) if op.params else "none"
        row["n_params"] = sum(trace.params[p].numel for p in op.params if p in trace.params)
        if n.repeat > 1:
            row["shape"] = f"{n.repeat} tensors, first {row['shape']}"
        row["fill"] = fill_color(n.kind, op_family(op) if n.kind == "op" else None)
        return row
    addresses = n.members or (n.module or "",)
    total = sum(tree.param_count(a) for a in addresses)
    row["n_params"] = total
    row["params"] = f"{total:,}" + (f" in {n.repeat} blocks" if n.repeat > 1 else "")
    out = _module_output(trace, addresses[0])
    if out is not None and out.out is not None:
        row["shape"], row["dtype"] = shape_text(out.out.shape), out.out.dtype
    row["op_kind"] = trace.modules[addresses[0]].class_name if addresses[0] in trace.modules else ""
    row["fill"] = fill_color(n.kind)
    return row


def _module_output(trace: Trace, address: str):
    scope = trace.modules.get(address)
    if scope is not None and scope.calls and scope.calls[0].outputs:
        label = scope.calls[0].outputs[0]
        return trace[label] if label in trace else None
    return None


TOOLBAR_PX = 30
FIT_PAD_PX = 16.0
MAX_FIT_SCALE = 1.0  # a fit never magnifies past 100 % (1 layout unit = 1 px: labels at FONT_SIZE px)
READABLE_PX = 10.0  # the smallest label size a fit of the app's view settles for (issue 36: >= 9 px)
READABLE_SCALE = READABLE_PX / FONT_SIZE  # ... as a zoom: a box bigger than fits there shows its top-left part


def fit_ranges(layout: Layout, width_px: float, height_px: float, pad: float = FIT_PAD_PX) -> tuple[float, float, float, float]:
    """x0, x1, y_top, y_bottom showing the whole layout in a `width_px` x `height_px` plot, one scale
    on both axes, never past 100 %, centred (the same fit the browser applies on resize)."""
    return fit_box((0.0, 0.0, layout.width, layout.height), width_px, height_px, pad)


def fit_box(box: tuple[float, float, float, float], width_px: float, height_px: float,
            pad: float = FIT_PAD_PX, max_scale: float = MAX_FIT_SCALE) -> tuple[float, float, float, float]:
    """Ranges that fit `box` (x0, y0, x1, y1 in layout units) into the plot: see `fit_ranges`."""
    x0, y0, x1, y1 = box
    w, h = max(x1 - x0, 1.0), max(y1 - y0, 1.0)
    s = min(max(width_px - 2 * pad, 1.0) / w, max(height_px - 2 * pad, 1.0) / h, max_scale)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return cx - width_px / (2 * s), cx + width_px / (2 * s), cy - height_px / (2 * s), cy + height_px / (2 * s)


WHEEL_SPEED = 1 / 700  # Bokeh's zoom per wheel pixel: one notch (100 px in Chromium) zooms about 14 %
MIN_LABEL_PX = 6.0  # labels smaller than this on screen are hidden (an unreadable pile helps nobody)


def scale_text_with_zoom(fig, renderers) -> None:
    """Keep text the size of its box at every zoom: `FONT_SIZE` layout units in screen pixels, hidden
    below MIN_LABEL_PX (boxes are sized for their text in layout units, so text never overflows)."""
    from bokeh.models import CustomJS

    code = f"""
const span = Math.abs(xr.end - xr.start);
const px = fig.inner_width > 0 ? fig.inner_width : fig.width;
if (!(span > 0) || !(px > 0)) return;
const size = {FONT_SIZE} * px / span;
const text = size.toFixed(2) + "px", shown = size >= {MIN_LABEL_PX};
for (const r of renderers) {{  // only real changes, kept in the page (the server never reads them: no message)
  if (r.visible !== shown) r.setv({{visible: shown}}, {{sync: false}});
  if (r.__tlx_size !== text) {{ r.__tlx_size = text; r.glyph.setv({{text_font_size: text}}, {{sync: false}}); }}
}}"""
    cb = CustomJS(args=dict(xr=fig.x_range, fig=fig, renderers=list(renderers)), code=code)
    fig.x_range.js_on_change("start", cb)
    fig.x_range.js_on_change("end", cb)
    fig.js_on_change("inner_width", cb)


VIEW_COLUMNS = ("x0", "y0", "x1", "y1", "max_scale", "min_scale", "seq")


def fit_js(pad: float) -> str:
    """Fit the view source's one box into the plot as drawn in the browser (its size is known only
    there), `pad` pixels from its sides: one scale on both axes, between the source's `min_scale`
    and `max_scale`; y grows downwards. A box too tall to fit at `min_scale` shows at that scale from
    its top (where a top-down graph's inputs enter), centred across: labels stay readable, the rest
    is a pan away."""
    return f"""
const d = view.data;
if (!d.x0 || !d.x0.length) return;
const iw = fig.inner_width, ih = fig.inner_height;
if (!(iw > 0) || !(ih > 0)) return;
const pad = {pad};
const w = Math.max(d.x1[0] - d.x0[0], 1), h = Math.max(d.y1[0] - d.y0[0], 1);
const least = d.min_scale ? Math.min(d.min_scale[0], d.max_scale[0]) : 0;
const s = Math.max(Math.min(Math.max(iw - 2 * pad, 1) / w, Math.max(ih - 2 * pad, 1) / h, d.max_scale[0]), least);
let cx = (d.x0[0] + d.x1[0]) / 2, cy = (d.y0[0] + d.y1[0]) / 2;
if (h * s > ih - 2 * pad) cy = d.y0[0] - pad / s + ih / (2 * s);
fig.x_range.setv({{start: cx - iw / (2 * s), end: cx + iw / (2 * s)}});
fig.y_range.setv({{start: cy + ih / (2 * s), end: cy - ih / (2 * s)}});
"""


# on a new box, and again when the plot is resized
FIT_JS = fit_js(FIT_PAD_PX)


def view_data(box: tuple[float, float, float, float], seq: int = 0, max_scale: float = MAX_FIT_SCALE,
              min_scale: float = 0.0) -> dict[str, list]:
    """Column data of the view source: the box (layout units) the browser fits into the plot, at a
    scale between `min_scale` (`READABLE_SCALE`: labels stay readable) and `max_scale`."""
    x0, y0, x1, y1 = box
    return {"x0": [x0], "y0": [y0], "x1": [x1], "y1": [y1], "max_scale": [max_scale], "min_scale": [min_scale],
            "seq": [seq]}


def view_source(fig: Any) -> Any:
    """The figure's view source (the box the browser fits), found without walking the model graph."""
    return fig.js_property_callbacks["change:inner_height"][-1].args["view"]


CHEVRON = "\u25b4"  # drawn at the right end of an open frame's header: a click on the header closes it
CHAR_W = HEADER_CHAR_W  # no chevron where the label may reach


def polylines(edges: list) -> tuple[list[list[float]], list[list[float]]]:
    """Each edge's x and y points, rounded to 0.1 unit in one pass over all of them."""
    flat = coords([p for e in edges for p in e.points]).reshape(-1, 2).T.tolist() if edges else [[], []]
    xs, ys, at = [], [], 0
    for e in edges:
        n = len(e.points)
        xs.append(flat[0][at:at + n])
        ys.append(flat[1][at:at + n])
        at += n
    return xs, ys


def figure_data(layout: Layout, trace: Trace) -> dict[str, dict[str, list[Any]]]:
    """Column data of every source the figure draws, by renderer name: "frames", "edges", "arrows",
    "nodes" (an app updates a live figure by assigning these, never rebuilding it)."""
    frames = {
        "address": [f.address for f in layout.frames], "call": [f.call for f in layout.frames],
        "label": [f.label for f in layout.frames],
        "left": coords([f.x0 for f in layout.frames]), "right": coords([f.x1 for f in layout.frames]),
        "top": coords([f.y0 for f in layout.frames]), "bottom": coords([f.y1 for f in layout.frames]),
        "tx": coords([f.x0 + 6 for f in layout.frames]), "ty": coords([f.y0 + 13 for f in layout.frames]),
        "fill": [("#fbfbfb", "#f3f6fa", "#eef2f7", "#e8eef5")[f.depth % 4] for f in layout.frames],
        "cx": coords([f.x1 - 12 for f in layout.frames]),
        "chevron": [CHEVRON if f.address and f.x1 - f.x0 >= CHAR_W * len(f.label) + 40 else "" for f in layout.frames],
    }
    edges = list(layout.edges)
    xs, ys = polylines(edges)
    lines = {"xs": xs, "ys": ys,
             "line_color": edge_colors(edges)}
    heads = {
        "x_start": coords([e.points[-2][0] for e in edges]), "y_start": coords([e.points[-2][1] for e in edges]),
        "x_end": coords([e.points[-1][0] for e in edges]), "y_end": coords([e.points[-1][1] for e in edges]),
        "source": [e.source for e in edges], "target": [e.target for e in edges],
    }
    return {"frames": frames, "edges": lines, "arrows": heads, "nodes": node_table(layout, trace)}


HIDE_TOOLTIP_JS = """
const views = hover.document != null ? hover.document.views_manager : null;
const v = views != null ? views.find_one(hover) : null;
if (v != null && typeof v._move_exit === "function") v._move_exit();
"""

# A frame's title stays in view while its frame does: panned or centred so that the frame's left edge is out of
# the window, the title slides right to the window's left edge (never past the room its frame has before the
# chevron). Moved in the page only (the column changed in place, no message to the server), again whenever the
# view or the frames change.
STICKY_TITLES_JS = f"""
const d = frames.data, n = d.label ? d.label.length : 0;
if (!n || !d.tx) return;
const start = Math.min(xr.start, xr.end);
let moved = false;
for (let i = 0; i < n; i++) {{
  const home = d.left[i] + 6;
  const room = d.right[i] - (d.chevron[i] ? 24 : 6) - {CHAR_W} * String(d.label[i]).length;
  const x = Math.max(home, Math.min(start + 6, room));
  if (d.tx[i] !== x) {{ d.tx[i] = x; moved = true; }}
}}
if (moved) frames.change.emit();
"""


def keep_titles_in_view(fig: Any, frames: Any) -> None:
    """Frame titles slide along their frame's header to stay in the window (`STICKY_TITLES_JS`)."""
    from bokeh.models import CustomJS

    cb = CustomJS(args=dict(xr=fig.x_range, frames=frames), code=STICKY_TITLES_JS)
    for attr in ("start", "end"):
        fig.x_range.js_on_change(attr, cb)
    frames.js_on_change("data", cb)


# Installed once per figure (on its first size): when the figure's element changes size without BokehJS laying
# the plot out again (Panel grows the element when a pane above it shrinks, e.g. the banner folding to one line:
# the canvas grew, the plot frame kept its old height and left a blank band), lay the plot out again.
RELAYOUT_JS = """
if (fig.__tlx_relayout) return;
const views = fig.document != null ? fig.document.views_manager : null;
const v = views != null ? views.find_one(fig) : null;
if (v == null || typeof ResizeObserver === "undefined") return;
fig.__tlx_relayout = true;
let last = null;
new ResizeObserver(() => {
  const r = v.el.getBoundingClientRect(), size = Math.round(r.width) + "x" + Math.round(r.height);
  if (last !== null && size !== last) requestAnimationFrame(() => v.invalidate_layout());
  last = size;
}).observe(v.el);
"""

DIMMED = 0.3  # the alpha of boxes outside a selection (the app selects an op's neighbours)
DIMMED_TEXT = 0.8  # ... and of their labels: faded, still readable (issue 36: 0.1 left them illegible; at 0.65 OCR missed some)


def add_glyph(fig: Any, source: Any, glyph: Any, name: str | None = None, dim: bool = False) -> Any:
    """Add `glyph` over `source` to a plain Plot; `dim`: rows outside the source's selection fade."""
    from bokeh.models import GlyphRenderer

    extra = {}
    if dim:
        faded = glyph.clone()
        for prop, alpha in (("fill_alpha", DIMMED), ("line_alpha", DIMMED), ("text_alpha", DIMMED_TEXT)):
            if prop in faded.properties():
                setattr(faded, prop, alpha)
        extra["nonselection_glyph"] = faded
    renderer = GlyphRenderer(data_source=source, glyph=glyph, name=name, **extra)
    fig.renderers.append(renderer)
    return renderer


def bare_plot(**kwargs: Any) -> Any:
    """A Bokeh Plot with no axes, grid or outline on white (fewer models to build, send and draw than a
    `figure` with its axes hidden)."""
    from bokeh.models import Plot

    return Plot(outline_line_color=None, background_fill_color="white", **kwargs)


def graph_figure(layout: Layout, trace: Trace, *, caption: str | None = None, width: int = 900, height: int = 700,
                 sizing_mode: str | None = None, save: bool = True):
    """A Bokeh figure drawing `layout` (pan, wheel zoom, tap, hover, and a save button unless not `save`),
    fitted to the plot; `caption` goes below the plot. Its "view" source (`view_source(fig)`) holds the box
    the browser fits."""
    from bokeh.models import (Arrow, BoxZoomTool, ColumnDataSource, CustomJS, HoverTool, MultiLine, PanTool, Quad,
                              Range1d, Rect, SaveTool, TapTool, Text, Title, VeeHead, WheelZoomTool)
    from bokeh.core.properties import value

    x0, x1, y0, y1 = fit_ranges(layout, width, height - TOOLBAR_PX)
    fig = bare_plot(width=width, height=height, x_range=Range1d(x0, x1), y_range=Range1d(y1, y0),
                    toolbar_location="above", sizing_mode=sizing_mode)
    wheel = WheelZoomTool(speed=WHEEL_SPEED)
    fig.add_tools(PanTool(), wheel, BoxZoomTool(), *([SaveTool()] if save else []))
    fig.toolbar.active_scroll = wheel  # the wheel zooms from the first notch (issue 36: it scrolled the page)
    data = figure_data(layout, trace)
    font = dict(text_font_size=f"{FONT_SIZE:g}px", text_font=value(FONT_FAMILY))

    frames = ColumnDataSource(data["frames"], name="tlx-frames")
    add_glyph(fig, frames, Quad(left="left", right="right", top="top", bottom="bottom", fill_color="fill",
                                line_color="#9aa7b8"), "frames")
    frame_labels = add_glyph(fig, frames, Text(x="tx", y="ty", text="label", text_font_style="bold", text_color="#334",
                                               text_baseline="alphabetic", **font), "frame_labels")
    chevrons = add_glyph(fig, frames, Text(x="cx", y="ty", text="chevron", text_color="#556", text_align="center",
                                           text_baseline="alphabetic", **font), "frame_chevrons")
    keep_titles_in_view(fig, frames)
    add_glyph(fig, ColumnDataSource(data["edges"], name="tlx-edges"),
              MultiLine(xs="xs", ys="ys", line_color="line_color", line_width=1), "edges")
    arrows = Arrow(end=VeeHead(size=7, fill_color=EDGE, line_color=EDGE),
                   source=ColumnDataSource(data["arrows"], name="tlx-arrows"),
                   x_start="x_start", y_start="y_start", x_end="x_end", y_end="y_end", line_alpha=0.0,
                   name="arrows")
    fig.add_layout(arrows)

    nodes = ColumnDataSource(data["nodes"])
    node_r = add_glyph(fig, nodes, Rect(x="x", y="y", width="w", height="h", fill_color="fill", line_color="#555555"),
                       "nodes", dim=True)
    labels = add_glyph(fig, nodes, Text(x="x", y="y", text="label", text_align="center", text_baseline="middle", **font),
                       "labels", dim=True)
    scale_text_with_zoom(fig, [labels, frame_labels, chevrons])
    view = ColumnDataSource(view_data((0.0, 0.0, layout.width, layout.height)), name="view")
    fit = CustomJS(args=dict(fig=fig, view=view), code=FIT_JS)
    view.js_on_change("data", fit)
    fig.js_on_change("inner_width", fit)
    fig.js_on_change("inner_height", fit)
    # inspect: a tap reports where it landed and selects nothing in the browser (the app decides what is selected)
    hover = HoverTool(renderers=[node_r], tooltips=list(HOVER_FIELDS))
    fig.add_tools(hover, TapTool(renderers=[node_r], behavior="inspect"))
    # a click puts the tooltip away (and it is not shown again over the redrawn boxes until the pointer moves)
    fig.js_on_event("tap", CustomJS(args=dict(hover=hover), code=HIDE_TOOLTIP_JS))
    fig.js_on_change("inner_width", CustomJS(args=dict(fig=fig), code=RELAYOUT_JS))
    if caption:
        fig.add_layout(Title(text=caption, align="center", text_font_style="italic"), "below")
    return fig
