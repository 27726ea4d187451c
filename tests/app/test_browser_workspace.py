"""The explorer's screen in Chromium at 1366x768 and 1600x1000: nothing scrolls the page, the graph
fills the window and fits at start, the inspector stays in view, the module tree shows whole names
without pages, Esc and a blank click clear the selection, the status line answers the same action,
and the URL keeps the view so a link reopens it.
"""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.app import pagekit

pytestmark = pytest.mark.browser

SIZES = [(1366, 768), (1600, 1000)]

# Elements are found through Panel's shadow roots (css classes live on the components' hosts).
RECT_JS = """(cls) => { const seen = []; const walk = (root) => { for (const e of root.querySelectorAll('*')) {
    if (e.classList && e.classList.contains(cls)) seen.push(e); if (e.shadowRoot) walk(e.shadowRoot); } };
  walk(document); if (!seen.length) return null; const r = seen[0].getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom]; }"""


def open_page(page, url):
    page.goto(url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)
    pagekit.settle(page)


def inside(rect, viewport):
    w, h = viewport
    return rect[0] >= -1 and rect[1] >= -1 and rect[2] <= w + 1 and rect[3] <= h + 1


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_page_fits_the_window_and_the_start_view_fits_the_graph(default_url, page, artifacts_dir, size):
    page.set_viewport_size({"width": size[0], "height": size[1]})
    open_page(page, default_url)
    page.wait_for_timeout(500)
    scroll = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight,"
                           " document.body.scrollHeight]")
    assert scroll[0] <= size[0] and scroll[1] <= size[1] and scroll[2] <= size[1], scroll
    canvas = pagekit.plot_rect(page)
    assert canvas is not None and inside(canvas, size), canvas
    assert canvas[3] - canvas[1] > size[1] * 0.5  # the graph takes most of the window's height
    inspector = page.evaluate(RECT_JS, "tlx-inspector-panel")
    assert inspector is not None and inside(inspector, size) and inspector[0] >= canvas[2] - 1  # right of the graph
    # the start view (issue 36): the 32-layer page's top at a readable zoom, the first boxes on the canvas
    on_canvas = [n for n in pagekit.nodes(page) if canvas[0] <= pagekit.to_page(page, n["x"], n["y"])[0] <= canvas[2]
                 and canvas[1] <= pagekit.to_page(page, n["x"], n["y"])[1] <= canvas[3]]
    assert {"mod:model.embed_tokens", "mod:model.layers.0"} <= {n["id"] for n in on_canvas}, on_canvas
    # the module tree: a collapsible list, no pages, whole names (a folded row opens in place)
    page.locator(".tlx-tree summary", has_text="0-31: LlamaDecoderLayer x32").first.evaluate("e => e.parentElement.open = true")
    cell = page.locator(".tlx-tree .tlx-tree-name", has_text="post_attention_layernorm: LlamaRMSNorm").first
    expect(cell).to_be_visible()
    assert cell.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    expect(page.locator(".tlx-legend")).to_contain_text("compute")
    # the side tabs scroll in their own column: their last button comes into view, the page stays put
    button = page.locator(".tlx-discharge button").first
    button.scroll_into_view_if_needed()
    box = button.bounding_box()
    assert box["y"] + box["height"] <= size[1] and page.evaluate("() => window.scrollY") == 0
    page.evaluate("() => { const walk = (root) => { for (const e of root.querySelectorAll('*')) {"
                  " if (e.scrollTop) e.scrollTop = 0; if (e.shadowRoot) walk(e.shadowRoot); } }; walk(document); }")
    pagekit.shot(page, artifacts_dir, f"explorer-screen-{size[0]}x{size[1]}")


def test_a_click_on_the_lowest_layer_at_1366x768_lands(default_url, page):
    page.set_viewport_size({"width": 1366, "height": 768})
    open_page(page, default_url)
    canvas = pagekit.plot_rect(page)
    drawn = [n for n in pagekit.nodes(page) if n["id"].startswith("mod:model.layers.")
             and pagekit.to_page(page, n["x"], n["y"])[1] < canvas[3] - 8]  # the lowest layer in view (issue 36)
    lowest = max(drawn, key=lambda n: n["y"])
    address = lowest["id"].removeprefix("mod:")
    pagekit.click_node(page, lowest["id"])
    pagekit.wait_node(page, lowest["id"], present=False)
    expect(page.locator(".tlx-last-action")).to_contain_text(f"expanded {address}")
    expect(page.locator(".tlx-breadcrumb")).to_contain_text(address.removeprefix("model."))


def _search(page, text):
    box = page.locator(".tlx-search input")
    box.fill(text)
    box.press("Enter")


def test_esc_and_a_blank_click_clear_the_selection(default_url, default_loaded, page, artifacts_dir):
    op = next(o for o in default_loaded.trace.ops if o.module == "model.layers.0.self_attn.q_proj")
    page.set_viewport_size({"width": 1366, "height": 768})
    open_page(page, default_url)
    inspector = page.locator(".tlx-inspector")
    _search(page, op.label)
    expect(inspector).to_contain_text(f"Op {op.label}")
    expect(page.locator(".tlx-breadcrumb")).to_contain_text(f"layers.0 \u203a self_attn \u203a q_proj \u203a {op.label}")
    pagekit.wait_node(page, op.label)
    pagekit.shot(page, artifacts_dir, "explorer-screen-selected")
    page.keyboard.press("Escape")
    expect(inspector).to_contain_text("click an op in the graph")
    expect(page.locator(".tlx-last-action")).to_contain_text("Selection cleared")
    _search(page, op.label)
    expect(inspector).to_contain_text(f"Op {op.label}")
    canvas = pagekit.plot_rect(page)
    page.wait_for_timeout(600)  # outside Bokeh's double-tap window
    page.mouse.click(canvas[0] + 8, canvas[3] - 8)  # a corner of the canvas: nothing drawn there
    expect(inspector).to_contain_text("click an op in the graph")
    expect(page.locator(".tlx-last-action")).to_contain_text("selection cleared")


def test_nothing_matches_is_said_on_the_same_search(default_url, page):
    open_page(page, default_url)
    _search(page, "no_such_op_zz")
    expect(page.locator(".tlx-last-action")).to_contain_text("Nothing matches 'no_such_op_zz'")
    _search(page, "model.layers.5.mlp")
    expect(page.locator(".tlx-last-action")).to_contain_text("Module model.layers.5.mlp opened")
    _search(page, "no_such_op_zz")  # the same failing query again still answers
    expect(page.locator(".tlx-last-action")).to_contain_text("Nothing matches 'no_such_op_zz'")


def test_the_url_keeps_the_view_and_a_link_reopens_it(default_url, default_loaded, browser, page):
    op = next(o for o in default_loaded.trace.ops if o.module == "model.layers.2.mlp.down_proj")
    open_page(page, default_url)
    pagekit.click_node(page, "mod:model.layers.7")
    pagekit.wait_node(page, "mod:model.layers.7", present=False)
    _search(page, op.label)
    expect(page.locator(".tlx-inspector")).to_contain_text(f"Op {op.label}")
    page.wait_for_function("(l) => location.search.includes('sel=' + l)", arg=op.label, timeout=10_000)
    link = page.url
    assert re.search(r"open=[^&]*model\.layers\.7", link) and "q=" in link
    fresh = browser.new_page(viewport={"width": 1366, "height": 768})
    try:
        open_page(fresh, link)
        expect(fresh.locator(".tlx-inspector")).to_contain_text(f"Op {op.label}")
        drawn = {n["id"] for n in pagekit.nodes(fresh)}
        assert op.label in drawn and "mod:model.layers.7" not in drawn and "mod:model.layers.8" in drawn
        assert fresh.locator(".tlx-search input").input_value() == op.label
    finally:
        fresh.close()


def test_colour_by_an_overlay_recolours_the_boxes_and_explains_them(default_url, page, artifacts_dir):
    """[issue 15] Overlays in the app: FLOPs colour the boxes (modules rolled up) with their own legend."""
    page.set_viewport_size({"width": 1600, "height": 1000})
    open_page(page, default_url)
    before = {n["id"]: n["fill"] for n in pagekit.nodes(page)}
    page.locator(".tlx-overlay select").select_option(label="FLOPs (estimate)")
    expect(page.locator(".tlx-overlay-legend")).to_contain_text("FLOPs", timeout=15_000)
    page.wait_for_function("""(before) => { const d = Bokeh.documents[Bokeh.documents.length - 1];
        const s = d.get_model_by_name('tlx-nodes').data;
        return s.id.some((id, i) => before[id] !== undefined && before[id] !== s.fill[i]); }""",
                           arg=before, timeout=15_000)
    after = {n["id"]: n["fill"] for n in pagekit.nodes(page)}
    layers = [after[i] for i in after if i.startswith("mod:model.layers.")]
    assert len(set(layers)) == 1 and layers[0] != before["mod:model.layers.0"]  # identical layers, one colour
    assert after["mod:model.embed_tokens"] != after["mod:model.layers.0"]  # a lookup costs far fewer FLOPs
    pagekit.shot(page, artifacts_dir, "explorer-overlay-flops", docs=False)
    page.locator(".tlx-overlay select").select_option(label="op kind")
    expect(page.locator(".tlx-legend")).to_contain_text("compute", timeout=15_000)
