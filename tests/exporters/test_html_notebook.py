"""`exporters.notebook.explore`: the HTML page inline in a notebook output, rendered in Chromium."""
from __future__ import annotations

import pytest
import torch

import tracer
from exporters.notebook import explore
from tests.exporters.test_html import MARKUP, markup_model
from tests.models import tiny_gpt2


def test_repr_is_an_iframe_whose_srcdoc_is_escaped():
    view = explore(tracer.trace(markup_model(), (torch.randn(2, 4),)), title="<b>x</b>")
    out = view._repr_html_()
    assert out.startswith("<iframe") and out.count("<iframe") == 1 and "</iframe>" in out
    assert "<script" not in out and "&lt;script" in out  # the whole page travels as an attribute value
    assert MARKUP not in out


@pytest.mark.browser
@pytest.mark.slow
def test_notebook_output_renders_offline(browser):
    view = explore(tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),)))
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    blocked = []
    page.route("**/*", lambda r: (blocked.append(r.request.url), r.abort()))
    page.set_content(f"<html><body><h3>cell output</h3>{view._repr_html_()}</body></html>")
    frame = page.frame_locator("iframe.tlx-explorer")
    frame.locator("body[data-ready='1']").wait_for(timeout=20_000)
    assert frame.locator("g.node").count() > 5
    assert "OBSERVED" in frame.locator("#banner").inner_text()
    frame.locator("#search").fill("addmm")
    frame.locator("#hits .hit.op").first.click()
    assert frame.locator("#right h2").inner_text().startswith("addmm")
    assert not blocked
    page.close()
