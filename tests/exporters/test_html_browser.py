"""The self-contained HTML file opened from disk in Chromium with every non-file request aborted."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tracer
from exporters import overlays
from exporters.html import write_html
from exporters.layout import LayoutEngine
from tests.app import pagekit
from tests.exporters.test_html import MARKUP, ROOT_CLASS, markup_model
from tests.models import tiny_gpt2

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def open_offline(browser, path: Path, width: int, height: int):
    """A fresh page at width x height that may load file: URLs only; records dialogs, errors and requests."""
    page = browser.new_page(viewport={"width": width, "height": height})
    seen = {"dialogs": [], "errors": [], "blocked": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))

    def gate(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            seen["blocked"].append(route.request.url)
            route.abort()

    page.route("**/*", gate)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    return page, seen


def boxes(page) -> list[str]:
    return page.eval_on_selector_all("g.node", "els => els.map(e => e.getAttribute('data-id'))")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))
    return trace, write_html(trace, tmp_path_factory.mktemp("html") / "gpt2.html")


@pytest.fixture(scope="module")
def gpt2_html(gpt2):
    return gpt2[1]


def _rgb(color: str) -> tuple[int, ...]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def test_overlay_colours_on_the_canvas_match_the_python_overlay(browser, gpt2):
    """The page's fills for FLOPs (linear, sum) equal exporters.overlays on the same layout, box by box."""
    trace, path = gpt2
    page, seen = open_offline(browser, path, 1366, 768)
    page.select_option("#overlay", label="FLOPs (estimate)")
    page.select_option("#rollup", "max")
    drawn = dict(page.eval_on_selector_all(
        "g.node", "els => els.map(e => [e.getAttribute('data-id'), e.querySelector('rect').getAttribute('fill')])"))
    layout = LayoutEngine(trace).layout()
    ov = overlays.build_overlay(trace, "flops")
    values = overlays.node_values(layout, ov, "max")
    scale = overlays.color_scale(values.values(), "linear")
    assert set(drawn) == {n.id for n in layout.nodes}
    for node_id, fill in drawn.items():
        want = scale.color(values.get(node_id))
        assert all(abs(a - b) <= 1 for a, b in zip(_rgb(fill), _rgb(want))), (node_id, fill, want)
    assert len(set(drawn.values())) >= 3
    # every edge drawn is the layout's polyline rounded to whole units (repeated points left out)
    lines = page.eval_on_selector_all("polyline", "els => els.map(e => e.getAttribute('points'))")
    want = [_dedup([(round(x), round(y)) for x, y in e.points]) for e in layout.edges]
    got = [_dedup([tuple(int(v) for v in p.split(",")) for p in line.split()]) for line in lines]
    assert got == want
    assert not seen["errors"]
    page.close()


def _dedup(points: list) -> list:
    return [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]


@pytest.mark.parametrize("size", [(1366, 768), (1600, 1000)])
def test_expand_search_inspect_and_overlay_offline(browser, gpt2_html, size, artifacts_dir):
    page, seen = open_offline(browser, gpt2_html, *size)
    assert "mod:transformer.h.0" in boxes(page)
    assert page.evaluate("document.documentElement.scrollHeight <= innerHeight && "
                         "document.documentElement.scrollWidth <= innerWidth")  # no page scroll
    page.dispatch_event("g.node[data-id='mod:transformer.h.0']", "dblclick")  # expand a block
    shown = boxes(page)
    assert "mod:transformer.h.0.attn" in shown and "mod:transformer.h.0" not in shown
    page.fill("#search", "addmm")
    page.locator("#hits .hit.op").first.click()
    label = page.locator("#right h2").inner_text()
    assert label.startswith("addmm")
    assert page.locator("g.node.sel").count() == 1
    inspector = page.locator("#right").inner_text()
    for field in ("function", "output shape", "dtype", "module", "source", "attributes"):
        assert field in inspector
    page.select_option("#overlay", label="FLOPs (estimate)")
    fills = set(page.eval_on_selector_all("g.node > rect", "els => els.map(e => e.getAttribute('fill'))"))
    assert len(fills) >= 3  # boxes coloured by value, not one flat colour
    assert "FLOPs (estimate)" in page.locator("#legend").inner_text()
    page.select_option("#scale", "log")
    assert "log scale" in page.locator("#legend").inner_text()
    page.locator("#hits .hit.op").first.click()  # selected again, for the screenshot with the inspector
    pagekit.shot(page, artifacts_dir, f"html_gpt2_{size[0]}x{size[1]}")  # docs/images only when asked
    page.keyboard.press("Escape")
    assert page.locator("g.node.sel").count() == 0
    assert not seen["errors"] and not seen["dialogs"] and not seen["blocked"]
    page.close()


def test_markup_names_show_as_text_and_run_nothing(browser, tmp_path):
    trace = tracer.trace(markup_model(), (torch.randn(2, 4),))
    page, seen = open_offline(browser, write_html(trace, tmp_path / "markup.html"), 1366, 768)
    page.fill("#search", "onerror")
    hits = page.locator("#hits").inner_text()
    assert MARKUP in hits
    page.locator("#hits .hit.mod").first.click()
    assert page.locator("img").count() == 0
    assert page.locator("#title").inner_text() == ROOT_CLASS  # the model class, shown as text
    assert page.title().startswith(ROOT_CLASS)
    canvas_text = page.eval_on_selector("svg#canvas", "e => e.textContent") + page.locator("#crumbs").inner_text()
    assert "<script>alert('cls')</script>Block" in canvas_text or MARKUP in canvas_text
    assert not seen["dialogs"] and not seen["errors"]
    page.close()


def test_labels_scale_with_zoom_hide_when_too_small_and_headers_stay_visible(browser, gpt2_html):
    """Wheel zoom scales the label text with the boxes; below a legible size labels hide; a frame's
    header text is the topmost element at its own position (no child box covers it)."""
    page, seen = open_offline(browser, gpt2_html, 1366, 768)
    page.dispatch_event("g.node[data-id='mod:transformer.h.0']", "dblclick")
    box = page.locator("#canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)

    def state():
        return page.evaluate("""() => { const t = document.querySelector('g.node text'), vp = document.getElementById('viewport');
          const k = +vp.getAttribute('transform').match(/scale\\(([^)]+)\\)/)[1];
          return [k, t.getBoundingClientRect().height, getComputedStyle(t).display]; }""")

    k1, h1, shown1 = state()
    page.mouse.wheel(0, -200)  # zoom in
    k2, h2, _ = state()
    assert k2 > k1 and shown1 != "none"
    assert h2 / h1 == pytest.approx(k2 / k1, rel=0.1)  # text grows with the zoom, not a fixed pixel size
    headers = page.evaluate("""() => { const c = document.getElementById('canvas').getBoundingClientRect();
      return [...document.querySelectorAll('g.frame text.hdr')].map((t) => { const r = t.getBoundingClientRect();
        const x = r.left + Math.min(20, r.width / 2), y = r.top + r.height / 2;
        if (x < c.left || x > c.right || y < c.top || y > c.bottom) return null;
        const hit = document.elementFromPoint(x, y);
        return [t.textContent, hit === t || t.contains(hit), hit && hit.outerHTML.slice(0, 80)]; }).filter(Boolean); }""")
    assert headers and all(ok for _, ok, _ in headers), headers  # every header in view is on top
    for _ in range(40):  # zoom out until labels would print under 4.5 px
        page.mouse.wheel(0, 400)
        if state()[0] * 11 < 4.5:
            break
    k3, _, shown3 = state()
    assert k3 * 11 < 4.5 and shown3 == "none"
    assert not seen["errors"]
    page.close()


def test_a_long_forward_opens_in_spans_and_its_ops_stay_searchable(browser, tmp_path):
    from tests.models import long_loop

    trace = tracer.trace(long_loop(), (torch.randn(2, 4),))
    page, seen = open_offline(browser, write_html(trace, tmp_path / "long.html"), 1366, 768)
    spans = [b for b in boxes(page) if b.startswith("mod:~")]
    assert 2 <= len(spans) <= 256 and len(boxes(page)) <= 260  # spans of ops, not 2,100 boxes
    label = trace.ops[len(trace.ops) // 2].label
    page.fill("#search", label)
    page.locator("#hits .hit.op").first.click()
    assert page.locator("#right h2").inner_text().startswith(label)  # the inspector shows the op
    assert not seen["errors"] and not seen["dialogs"] and not seen["blocked"]
    page.close()


@pytest.mark.parametrize("size", [(1366, 768), (1600, 1000)])
def test_inspector_follows_an_expand_reads_attributes_and_frame_headers_stay_in_view(browser, gpt2_html, size):
    """[issue 36 item 7] After Expand the inspector no longer says "collapsed"; an op's attributes read as
    key: value lines, not raw JSON; the opened module's frame header is inside the canvas (not cut at the left)."""
    page, seen = open_offline(browser, gpt2_html, *size)
    page.locator("g.node[data-id='mod:transformer.h.0']").click()
    assert "collapsed" in page.locator("#right").inner_text()
    page.locator("#expand-btn").click()
    right = page.locator("#right").inner_text()
    assert "collapsed" not in right and "expanded" in right and "GPT2Block" in right
    for address in ("transformer.h.0", "transformer.h.0.attn"):
        page.evaluate("() => 0")
        if address != "transformer.h.0":
            page.locator(f"g.node[data-id='mod:{address}']").dispatch_event("dblclick")
        canvas = page.locator("#canvas").bounding_box()
        header = page.evaluate("""(a) => { const t = [...document.querySelectorAll('.frame .hdr')]
            .find((t) => t.querySelector('title').textContent === 'collapse ' + a); const b = t.getBoundingClientRect();
            return {x: b.left, y: b.top, r: b.right}; }""", address)
        assert header["x"] >= canvas["x"] and header["y"] >= canvas["y"], (address, header, canvas)
    page.locator("#search").fill("addmm")
    page.locator("#hits .hit.op").first.click()
    attrs = page.locator("#right tr", has_text="attributes").inner_text()
    assert "{" not in attrs and '"' not in attrs and "args:" in attrs, attrs
    assert "transformer.h.0.attn.c_attn.bias (param)" in attrs, attrs
    # centred on the op, frames around it reach past the canvas's left edge: their headers stay inside it
    page.mouse.move(canvas["x"] + canvas["width"] / 2, canvas["y"] + canvas["height"] / 2)
    page.mouse.wheel(0, -900)  # closer on the op: the frames around it reach past the edge
    page.wait_for_timeout(100)
    cut = page.evaluate("""(left) => [...document.querySelectorAll('.frame')].map((g) => {
        const f = g.querySelector('rect').getBoundingClientRect(), t = g.querySelector('.hdr').getBoundingClientRect();
        return {header: g.querySelector('.hdr').textContent, frame: f.left, right: f.right, text: t.left};
      }).filter((h) => h.frame < left && h.right > left + 300)""", canvas["x"])
    assert cut and all(h["text"] >= canvas["x"] for h in cut), cut
    assert not seen["errors"], seen["errors"]
    page.close()
