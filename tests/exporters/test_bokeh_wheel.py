"""[issue 36 item 7] The graph figure's wheel: active from the first notch, a steady ~14 % per notch."""
from __future__ import annotations

import pytest
import torch

import tracer
from exporters.bokeh_graph import graph_figure
from exporters.layout import LayoutEngine
from tests.models import tiny_gpt2

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SPAN = "() => { const f = Bokeh.documents[0].get_model_by_name('g'); return f.x_range.end - f.x_range.start; }"


def test_each_wheel_notch_zooms_between_10_and_20_percent(browser, tmp_path):
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))
    fig = graph_figure(LayoutEngine(trace).layout(), trace, width=900, height=700)
    fig.name = "g"
    path = tmp_path / "graph.html"
    path.write_text(file_html(fig, INLINE, "graph"), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    page.goto(path.as_uri())
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].get_model_by_name('g')")
    page.wait_for_timeout(500)
    page.mouse.move(450, 400)
    spans = [page.evaluate(SPAN)]
    for _ in range(3):
        page.mouse.wheel(0, -100)  # one notch in
        page.wait_for_function(f"() => ({SPAN})() < {spans[-1]} - 1e-6", timeout=5_000)
        spans.append(page.evaluate(SPAN))
    ratios = [b / a for a, b in zip(spans, spans[1:])]
    assert all(0.8 <= r <= 0.9 for r in ratios), ratios  # visible (>= 10 %) and not a jump to one label (<= 20 %)
    page.close()
