"""exporters.bokeh_graph: figure structure (arrowheads, hover, frames) and a real render in Chromium."""
from __future__ import annotations

import pytest
import torch

import tracer
from exporters.bokeh_graph import HOVER_FIELDS, MIN_LABEL_PX, caption_for, graph_figure
from exporters.layout.style import FONT_FAMILY
from exporters.layout import compute_layout, default_expansion
from tests.models import tiny_gpt2

IDS = torch.tensor([[1, 2, 3, 4]])


@pytest.fixture(scope="module")
def gpt2():
    return tracer.trace(tiny_gpt2(2), (IDS,))


@pytest.fixture(scope="module")
def fig_and_layout(gpt2):
    lay = compute_layout(gpt2, default_expansion(gpt2) | {"transformer.h.0"})
    return graph_figure(lay, gpt2, caption=caption_for(gpt2)), lay


def test_nodes_carry_the_columns_the_app_reads(fig_and_layout, gpt2):
    from bokeh.models import HoverTool, TapTool

    fig, lay = fig_and_layout
    (nodes,) = fig.select(name="nodes")
    data = nodes.data_source.data
    for col in ("id", "kind", "label", "module", "shape", "dtype", "params"):
        assert len(data[col]) == len(lay.nodes), col
    assert data["id"] == [n.id for n in lay.nodes]
    row = data["id"].index("mod:transformer.h.0.attn")
    assert data["kind"][row] == "module" and data["shape"][row] == "1×4×32" and data["dtype"][row] == "float32"
    attn_params = sum(p.numel for a, p in gpt2.params.items() if a.startswith("transformer.h.0.attn.") and not p.is_buffer)
    assert data["n_params"][row] == attn_params and data["params"][row] == f"{attn_params:,}"
    add = next(i for i, n in enumerate(lay.nodes) if n.kind == "op" and n.op_label.startswith("add"))
    assert data["params"][add] == "none" and data["module"][add]
    assert len(set(data["fill"])) >= 3  # coloured by kind: io, modules and op families differ
    hover = [t for t in fig.tools if isinstance(t, HoverTool)]
    assert len(hover) == 1 and hover[0].renderers == [nodes]
    assert [name for name, _ in hover[0].tooltips] == [name for name, _ in HOVER_FIELDS]
    assert {"label", "module", "shape", "dtype", "params"} <= {name for name, _ in hover[0].tooltips}
    assert any(isinstance(t, TapTool) for t in fig.tools)


def test_edges_have_arrowheads_and_frames_carry_addresses(fig_and_layout):
    from bokeh.models import Arrow, VeeHead

    fig, lay = fig_and_layout
    (arrows,) = fig.select(name="arrows")
    assert isinstance(arrows, Arrow) and isinstance(arrows.end, VeeHead)
    heads = arrows.source.data
    assert len(heads["x_end"]) == len(lay.edges) > 0
    assert list(heads["y_end"]) == pytest.approx([e.points[-1][1] for e in lay.edges], abs=0.05)  # rounded to 0.1
    (edges,) = fig.select(name="edges")
    assert len(edges.data_source.data["xs"]) == len(lay.edges)
    (frames,) = fig.select(name="frames")
    assert frames.data_source.data["address"] == [f.address for f in lay.frames]
    assert "transformer.h.0" in frames.data_source.data["address"]
    assert fig.y_range.start > fig.y_range.end  # y grows downward, as in the layout


def test_caption_below_the_plot(fig_and_layout, gpt2):
    from bokeh.models import Title

    fig, _ = fig_and_layout
    below = [t for t in fig.below if isinstance(t, Title)]
    assert [t.text for t in below] == [caption_for(gpt2)]
    assert caption_for(gpt2).startswith("OBSERVED:")


@pytest.mark.browser
def test_figure_renders_in_chromium(fig_and_layout, page, artifacts_dir):
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    fig, _ = fig_and_layout
    html = artifacts_dir / "bokeh_graph_gpt2.html"
    html.write_text(file_html(fig, INLINE, "gpt2 graph"), encoding="utf-8")
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(html.as_uri())
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0 && Bokeh.documents[0].roots().length > 0")
    page.wait_for_timeout(300)
    n_nodes = page.evaluate(
        "() => Bokeh.documents[0].get_model_by_name('nodes').data_source.data['id'].length")
    assert n_nodes == len(fig.select(name="nodes")[0].data_source.data["id"])
    page.screenshot(path=str(artifacts_dir / "bokeh_graph_gpt2.png"))
    assert not errors, errors


def test_text_uses_the_layout_font_and_scales_with_zoom(fig_and_layout):
    from bokeh.core.properties import value
    from bokeh.models import CustomJS

    fig, _ = fig_and_layout
    for name in ("labels", "frame_labels"):
        (r,) = fig.select(name=name)
        assert r.glyph.text_font == value(FONT_FAMILY)  # a value, not a column name
    callbacks = fig.x_range.js_property_callbacks
    assert {"change:start", "change:end"} <= set(callbacks)
    assert all(isinstance(cb, CustomJS) for cbs in callbacks.values() for cb in cbs)


@pytest.mark.browser
def test_labels_fit_their_boxes_in_chromium_and_follow_zoom(fig_and_layout, page, artifacts_dir):
    """At 1366 px, every label measured with the browser's own font fits its box; zooming out shrinks
    the text and hides it below a legible size, zooming in grows it."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    fig, lay = fig_and_layout
    html = artifacts_dir / "bokeh_graph_gpt2_zoom.html"
    html.write_text(file_html(fig, INLINE, "gpt2 graph"), encoding="utf-8")
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(html.as_uri())
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0 && Bokeh.documents[0].roots().length > 0")
    page.wait_for_timeout(300)
    too_wide = page.evaluate("""([labels, widths, font]) => {
        const ctx = document.createElement('canvas').getContext('2d');
        ctx.font = `11px ${font}`;
        return labels.filter((t, i) => ctx.measureText(t).width > widths[i] - 2);
    }""", [[n.label for n in lay.nodes], [n.width for n in lay.nodes], FONT_FAMILY])
    assert too_wide == []
    size = """() => { const r = Bokeh.documents[0].get_model_by_name('labels');
                      return [parseFloat(r.glyph.text_font_size.value ?? r.glyph.text_font_size), r.visible]; }"""
    zoom = """k => { const xr = Bokeh.documents[0].roots()[0].x_range; const mid = (xr.start + xr.end) / 2;
                     const half = (xr.end - xr.start) / 2 * k; xr.start = mid - half; xr.end = mid + half; }"""
    base, _ = page.evaluate(size)
    page.evaluate(zoom, 0.5)
    bigger, shown = page.evaluate(size)
    assert bigger == pytest.approx(2 * base, rel=0.01) and shown
    page.evaluate(zoom, 8.0)
    smaller, shown = page.evaluate(size)
    assert smaller < MIN_LABEL_PX and not shown
