"""The overview (minimap) and a looped module in Chromium at 1366x768 and 1600x1000: the overview
is in view and nothing scrolls; a click on it, or a drag of its rectangle, moves the graph's view;
a looped block shows as one "x3 calls" box, a click lists its calls and a click on one call opens
that call alone."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.app import pagekit
from tests.app.conftest import served

pytestmark = pytest.mark.browser

SIZES = [(1366, 768), (1600, 1000)]

RANGES_JS = "() => {" + pagekit.FIND_PLOT_VIEW + """
  if (!view) return null;
  const m = view.model;
  return [m.x_range.start, m.x_range.end, m.y_range.start, m.y_range.end];
}"""

FRAMES_JS = """() => { const d = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-frames').data;
  return Array.from(d.address, (a, i) => [a, d.call[i]]); }"""


@pytest.fixture(scope="module")
def looped_url():
    from app.factory import open_factory

    with served(open_factory("tests.models:looped_mlp", (2, 16))) as url:
        yield url


def open_page(page, url, size):
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)
    page.wait_for_function("() => { try { return !!(" + pagekit.OVERVIEW_JS + ")(); } catch (e) { return false; } }",
                           timeout=30_000)
    settle_view(page)


def settle_view(page, timeout_s: float = 15.0) -> None:
    """Wait until the graph's view stops moving (the side panel arriving after the first paint may
    resize the plot, and the view refits): a click aimed before that may miss its box."""
    import time

    deadline, previous = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        pagekit.settle(page)
        ranges = page.evaluate(RANGES_JS)
        if ranges is not None and ranges == previous:
            return
        previous = ranges
        page.wait_for_timeout(250)


def centre(ranges):
    return (ranges[0] + ranges[1]) / 2, (ranges[2] + ranges[3]) / 2


def no_page_scroll(page, size):
    scroll = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    assert scroll[0] <= size[0] and scroll[1] <= size[1] and page.evaluate("() => window.scrollY") == 0, scroll


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_overview_is_in_view_and_a_click_or_a_drag_on_it_pans_the_graph(default_url, page, artifacts_dir, size):
    open_page(page, default_url, size)
    ov = pagekit.overview(page)
    plot = ov["plot"]
    assert plot[0] >= 0 and plot[1] >= 0 and plot[2] <= size[0] and plot[3] <= size[1], plot
    assert plot[2] - plot[0] > 200 and plot[3] - plot[1] > 80
    no_page_scroll(page, size)
    # the start view is the main view's rectangle on the overview: the graph's top at a readable zoom
    # (issue 36: the 32-layer page is taller than fits there), so the rectangle covers the top part
    before = page.evaluate(RANGES_JS)
    assert [round(v, 3) for v in ov["data"]] == [round(v, 3) for v in (before[0], before[3], before[1], before[2])]
    height = max(n["y"] for n in pagekit.nodes(page))
    assert before[3] < 20 and before[2] < height, (before, height)  # from the top, not all of it
    # zoom in (a click on a layer opens it and the view goes to it: from the readable 91 % to 100 %), then
    # click the overview's lower right
    pagekit.click_node(page, "mod:model.layers.0")
    pagekit.wait_node(page, "mod:model.layers.0", present=False)
    settle_view(page)
    page.wait_for_function("(b) => { const r = (" + RANGES_JS + ")(); return r && Math.abs(r[1] - r[0]) < 0.95 * Math.abs(b[1] - b[0]); }",
                           arg=before, timeout=15_000)
    pagekit.settle(page)
    zoomed = page.evaluate(RANGES_JS)
    ov = pagekit.overview(page)
    target = (ov["plot"][0] + 0.8 * (ov["plot"][2] - ov["plot"][0]), ov["plot"][1] + 0.85 * (ov["plot"][3] - ov["plot"][1]))
    page.mouse.click(*target)
    pagekit.settle(page)
    moved = page.evaluate(RANGES_JS)
    assert moved != zoomed and abs((moved[1] - moved[0]) - (zoomed[1] - zoomed[0])) < 1e-6  # panned, same zoom
    ov = pagekit.overview(page)
    vp = ov["viewport"]  # the rectangle follows: it is centred where the overview was clicked
    assert abs((vp[0] + vp[2]) / 2 - target[0]) < 3 and abs((vp[1] + vp[3]) / 2 - target[1]) < 3, (vp, target)
    # drag the rectangle 30 px left and 10 px up: the graph's view follows
    grab = ((vp[0] + vp[2]) / 2, (vp[1] + vp[3]) / 2)
    page.mouse.move(*grab)
    page.mouse.down()
    page.mouse.move(grab[0] - 15, grab[1] - 5, steps=3)
    page.mouse.move(grab[0] - 30, grab[1] - 10, steps=3)
    page.mouse.up()
    pagekit.settle(page)
    dragged = page.evaluate(RANGES_JS)
    assert centre(dragged)[0] < centre(moved)[0] and centre(dragged)[1] < centre(moved)[1], (moved, dragged)
    no_page_scroll(page, size)
    pagekit.shot(page, artifacts_dir, f"explorer-overview-{size[0]}x{size[1]}")


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_a_looped_block_is_one_box_and_one_call_opens_alone(looped_url, page, artifacts_dir, size):
    open_page(page, looped_url, size)
    box = next(n for n in pagekit.nodes(page) if n["id"] == "fold:block")
    assert box["label"] == "block: Sequential x3 calls"
    assert not [n for n in pagekit.nodes(page) if n["id"].startswith("mod:block")]
    pagekit.shot(page, artifacts_dir, f"explorer-looped-{size[0]}x{size[1]}")
    pagekit.click_node(page, "fold:block")
    pagekit.wait_node(page, "mod:block:2")
    settle_view(page)
    assert {"mod:block", "mod:block:1", "mod:block:2"} <= {n["id"] for n in pagekit.nodes(page)}
    pagekit.click_node(page, "mod:block:1")
    pagekit.wait_node(page, "mod:block:1", present=False)
    assert [f for f in page.evaluate(FRAMES_JS) if f[0] == "block"] == [["block", 1]]  # that call alone
    assert {"mod:block", "mod:block:2"} <= {n["id"] for n in pagekit.nodes(page)}
    expect(page.locator(".tlx-last-action")).to_contain_text("expanded block")
    no_page_scroll(page, size)
    pagekit.shot(page, artifacts_dir, f"explorer-looped-call-{size[0]}x{size[1]}")
