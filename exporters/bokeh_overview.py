"""A small overview (minimap) of a graph figure: the same frames and boxes at a glance, no text or
edges, with the main view's rectangle on it; a click there or a drag of the rectangle pans the main
figure. It draws from the main figure's own data sources, so a new layout reaches it with no data of
its own, and all of it runs in the browser (no server round trip for a pan)."""
from __future__ import annotations

from typing import Any

from .bokeh_graph import add_glyph, bare_plot, fit_js, view_data

OVERVIEW_PAD_PX = 4.0
VIEWPORT = "tlx-viewport"  # the name of the rectangle showing the main view (tests read it)

# The main view's ranges -> the rectangle, kept in the page (y grows downwards: a range's start is its
# bottom). The rectangle is found by name: the graph carries this callback from the start, so adding
# the overview later changes no model of the graph.
FOLLOW_JS = """
const doc = xr.document;
const box = doc == null ? null : doc.get_model_by_name('%s');
if (box == null || box.__tlx_busy) return;
box.__tlx_busy = true;
box.setv({left: xr.start, right: xr.end, bottom: yr.start, top: yr.end}, {sync: false});
box.__tlx_busy = false;
""" % VIEWPORT

# The rectangle dragged -> the main view's ranges (the same spans, the new centre).
DRAG_JS = """
if (box.__tlx_busy) return;
box.__tlx_busy = true;
xr.setv({start: box.left, end: box.right});
yr.setv({start: box.bottom, end: box.top});
box.__tlx_busy = false;
"""

# A click on the overview centres the main view there, keeping its zoom.
CLICK_JS = """
const hw = (xr.end - xr.start) / 2, hh = (yr.start - yr.end) / 2;
xr.setv({start: cb_obj.x - hw, end: cb_obj.x + hw});
yr.setv({start: cb_obj.y + hh, end: cb_obj.y - hh});
"""


def follow_view(main: Any) -> None:
    """Let graph figure `main`'s view drive the rectangle of an overview added later (call when building it)."""
    from bokeh.models import CustomJS

    follow = CustomJS(args=dict(xr=main.x_range, yr=main.y_range), code=FOLLOW_JS)
    for r in (main.x_range, main.y_range):
        r.js_on_change("start", follow)
        r.js_on_change("end", follow)


def _renderer(fig: Any, name: str) -> Any:
    return next(r for r in fig.renderers if r.name == name)


def overview_figure(main: Any, size: tuple[float, float], width: int = 380, height: int = 150) -> tuple[Any, Any]:
    """(overview figure, its fit source) for graph figure `main` (built with `follow_view`) laid out `size`
    = (width, height) units; put a new size in the fit source (`view_data`) when the layout's size changes."""
    from bokeh.events import Tap
    from bokeh.models import BoxAnnotation, ColumnDataSource, CustomJS, Quad, Range1d, Rect

    fig = bare_plot(width=width, height=height, toolbar_location=None, x_range=Range1d(0, size[0]),
                    y_range=Range1d(size[1], 0), min_border=0, sizing_mode="stretch_width", name="tlx-overview")
    fig.outline_line_color = "#c8d0da"
    frames, nodes = _renderer(main, "frames").data_source, _renderer(main, "nodes").data_source
    add_glyph(fig, frames, Quad(left="left", right="right", top="top", bottom="bottom", fill_color="fill",
                                line_color="#b5c0cc", line_width=0.5))
    add_glyph(fig, nodes, Rect(x="x", y="y", width="w", height="h", fill_color="fill", line_color=None))
    xr, yr = main.x_range, main.y_range
    box = BoxAnnotation(left=xr.start, right=xr.end, bottom=yr.start, top=yr.end, fill_color="#1f4f8a", fill_alpha=0.12,
                        line_color="#1f4f8a", line_width=1.5, editable=True, movable="both", resizable="none",
                        name=VIEWPORT)
    fig.add_layout(box)
    drag = CustomJS(args=dict(box=box, xr=xr, yr=yr), code=DRAG_JS)
    for side in ("left", "right", "top", "bottom"):
        box.js_on_change(side, drag)
    fig.js_on_event(Tap, CustomJS(args=dict(xr=xr, yr=yr), code=CLICK_JS))
    whole = ColumnDataSource(view_data((0.0, 0.0, *size), max_scale=1e9), name="tlx-overview-fit")
    fit = CustomJS(args=dict(fig=fig, view=whole), code=fit_js(OVERVIEW_PAD_PX))
    whole.js_on_change("data", fit)
    fig.js_on_change("inner_width", fit)
    fig.js_on_change("inner_height", fit)
    return fig, whole
