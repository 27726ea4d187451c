"""Getting around the graph in Chromium at 1366x768 and 1600x1000: the inspector's parents and
children are links (and stay bright on the canvas), each breadcrumb step opens its module, Expand all
and Collapse all, and the module tree folds and opens a module; the page never scrolls.
"""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.app import pagekit

pytestmark = pytest.mark.browser

SIZES = [(1366, 768), (1600, 1000)]

SELECTED_JS = """() => { const s = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes');
  return s.selected.indices.map(i => s.data.id[i]); }"""


def open_page(page, url, size):
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)
    pagekit.settle(page)


def search(page, text):
    box = page.locator(".tlx-search input")
    box.fill(text)
    box.press("Enter")


def not_scrolled(page):
    return page.evaluate("() => window.scrollY === 0 && document.documentElement.scrollHeight <= window.innerHeight + 1")


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_inspector_links_breadcrumb_steps_and_expand_collapse_all(default_url, default_loaded, page, artifacts_dir, size):
    trace = default_loaded.trace
    op = next(o for o in trace.ops if o.module == "model.layers.0.self_attn.q_proj")
    child = trace.children_of(op.label)[0]
    open_page(page, default_url, size)
    inspector = page.locator(".tlx-inspector")
    search(page, op.label)
    expect(inspector).to_contain_text(f"Op {op.label}")
    # the op and its neighbours stay bright on the canvas
    page.wait_for_function("(l) => (" + SELECTED_JS + ")().includes(l)", arg=op.label, timeout=10_000)
    bright = set(page.evaluate(SELECTED_JS))
    assert op.label in bright and len(bright) >= 2, bright
    pagekit.shot(page, artifacts_dir, f"explorer-neighbours-{size[0]}x{size[1]}", docs=size == (1600, 1000))
    # a child in the inspector is a link: it selects that op
    page.locator(".tlx-field-children .tlx-op-link", has_text=child).first.click()
    expect(inspector).to_contain_text(f"Op {child}")
    expect(page.locator(".tlx-field-parents")).to_contain_text(op.label)
    # a breadcrumb step opens its module
    page.locator(".tlx-crumb", has_text="layers.0").first.click()
    expect(inspector).to_contain_text("Module model.layers.0")
    expect(page.locator(".tlx-last-action")).to_contain_text("Module model.layers.0 opened")
    # Expand all opens every module under the focused one: the MLP's projections are drawn as ops
    down = next(o.label for o in trace.ops if o.module == "model.layers.0.mlp.down_proj")
    page.locator(".tlx-tool-link", has_text="Expand all").click()
    pagekit.wait_node(page, down)
    assert "mod:model.layers.1" in {n["id"] for n in pagekit.nodes(page)}  # other layers stay closed
    # the root step shows the whole graph; Collapse all leaves the root's children as boxes
    page.locator(".tlx-crumb").first.click()
    expect(page.locator(".tlx-last-action")).to_contain_text("The whole graph")
    page.locator(".tlx-tool-link", has_text="Collapse all").click()
    pagekit.wait_node(page, "mod:model")
    expect(page.locator(".tlx-last-action")).to_contain_text("Closed every module")
    assert not_scrolled(page)


def test_the_module_tree_folds_and_opens_a_module(default_url, page):
    open_page(page, default_url, (1366, 768))
    row = page.locator(".tlx-tree summary", has_text="0-31: LlamaDecoderLayer x32").first
    inner = page.locator(".tlx-tree .tlx-tree-name", has_text="self_attn: LlamaAttention").first
    expect(inner).to_be_hidden()
    row.evaluate("e => e.click()")  # the fold marker: opens the row in place, nothing sent to the server
    expect(inner).to_be_visible()
    inner.click()
    expect(page.locator(".tlx-inspector")).to_contain_text("Module model.layers.0.self_attn")
    pagekit.wait_node(page, "mod:model.layers.0", present=False)
    assert not_scrolled(page)


def test_search_lists_every_hit_and_a_hit_opens_its_op(default_url, page, artifacts_dir):
    open_page(page, default_url, (1600, 1000))
    search(page, "kind:linear class:LlamaMLP")
    hits = page.locator(".tlx-hits")
    expect(hits).to_contain_text("96 hits for")
    expect(hits.locator(".tlx-hit")).to_have_count(96)
    target = hits.locator(".tlx-hit", has_text="model.layers.31.mlp.down_proj").first
    label = target.locator(".tlx-op-link").inner_text()
    pagekit.shot(page, artifacts_dir, "explorer-search-hits")
    target.locator(".tlx-op-link").click()
    expect(page.locator(".tlx-inspector").first).to_contain_text(f"Op {label}")
    pagekit.wait_node(page, label)
    assert not_scrolled(page)


def test_inspector_values_wrap_between_parts_not_inside_words():
    """Issue 36: a long value breaks after its path dots, underscores and shape signs, never in a number."""
    from app.views.inspector import breakable, rows_html

    assert breakable("model.layers.0.q_proj.weight") == "model.<wbr>layers.0.<wbr>q_<wbr>proj.<wbr>weight"
    assert breakable("0.00278909 <b>") == "0.00278909 &lt;b&gt;"
    assert "break-all" not in rows_html("Op x", [("shape", "1\u00d78")])
