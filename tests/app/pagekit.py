"""Reading and driving the explorer page from Playwright (shared by browser tests and the benchmark).

The graph is a Bokeh canvas: these helpers read its node data source in the browser and turn a
node's data coordinates into page pixels through the live plot view, so a click lands on the box.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

NODES_JS = """() => {
  const doc = Bokeh.documents[Bokeh.documents.length - 1];
  const src = doc.get_model_by_name('tlx-nodes');
  if (!src) return null;
  const d = src.data;
  return Array.from(d.id, (id, i) => ({id, kind: d.kind[i], label: d.label[i], module: d.module[i],
                                       x: d.x[i], y: d.y[i], shape: d.shape[i], fill: d.fill[i]}));
}"""

FIND_PLOT_VIEW = """
  const seen = new Set();
  const stack = [...(Bokeh.index.roots || [])];
  let view = null;
  while (stack.length && !view) {
    const v = stack.pop();
    if (!v || seen.has(v)) continue;
    seen.add(v);
    if (v.model && (v.model.type === 'Figure' || v.model.type === 'Plot') && v.canvas_view
        && v.model.name !== 'tlx-overview') { view = v; break; }  // the graph, not its overview
    try { for (const c of v.children()) stack.push(c); } catch (e) {}
  }
"""

TO_PAGE_JS = """([x, y]) => {""" + FIND_PLOT_VIEW + """
  if (!view) return null;
  const rect = view.canvas_view.el.getBoundingClientRect();
  return [rect.left + view.frame.x_scale.compute(x), rect.top + view.frame.y_scale.compute(y)];
}"""

PLOT_RECT_JS = """() => {""" + FIND_PLOT_VIEW + """
  if (!view) return null;
  const rect = view.canvas_view.el.getBoundingClientRect(), f = view.frame.bbox;
  return [rect.left + f.left, rect.top + f.top, rect.left + f.right, rect.top + f.bottom];
}"""

# How far the graph's plot area stops short of the bottom of the figure's element (px; 0 or a few when laid out).
FRAME_GAP_JS = """() => {""" + FIND_PLOT_VIEW + """
  if (!view) return null;
  const el = view.el.getBoundingClientRect(), c = view.canvas_view.el.getBoundingClientRect();
  return el.bottom - (c.top + view.frame.bbox.bottom);
}"""

# The graph's open frames as the page draws them: label, left and right edges, the title's x, the view's left.
FRAME_TITLES_JS = """() => {""" + FIND_PLOT_VIEW + """
  if (!view) return null;
  const d = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-frames').data;
  const start = Math.min(view.model.x_range.start, view.model.x_range.end);
  return Array.from(d.label, (label, i) => ({label, left: d.left[i], right: d.right[i], tx: d.tx[i], start}));
}"""


OVERVIEW_JS = """() => {
  const seen = new Set(), stack = [...(Bokeh.index.roots || [])];
  let view = null;
  while (stack.length && !view) {
    const v = stack.pop();
    if (!v || seen.has(v)) continue;
    seen.add(v);
    if (v.model && v.model.name === 'tlx-overview' && v.canvas_view) { view = v; break; }
    try { for (const c of v.children()) stack.push(c); } catch (e) {}
  }
  if (!view) return null;
  const rect = view.canvas_view.el.getBoundingClientRect(), f = view.frame.bbox;
  const box = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-viewport');
  const sx = (x) => rect.left + view.frame.x_scale.compute(x), sy = (y) => rect.top + view.frame.y_scale.compute(y);
  return {plot: [rect.left + f.left, rect.top + f.top, rect.left + f.right, rect.top + f.bottom],
          viewport: [sx(box.left), sy(box.top), sx(box.right), sy(box.bottom)],
          data: [box.left, box.top, box.right, box.bottom]};
}"""


def overview(page) -> dict | None:
    """The overview (minimap) in page pixels: its plot area, the main view's rectangle on it (pixels
    and layout units), or None before it is drawn."""
    return page.evaluate(OVERVIEW_JS)


def plot_rect(page) -> list[float] | None:
    """The graph's plot area (where boxes are drawn) in page pixels: [left, top, right, bottom]."""
    return page.evaluate(PLOT_RECT_JS)


def frame_gap(page) -> float | None:
    """Pixels between the bottom of the graph's plot area and the bottom of its element."""
    return page.evaluate(FRAME_GAP_JS)


def wait_frame_fills(page, most_px: float = 12, timeout_ms: int = 10_000) -> None:
    """Wait until the graph's plot area ends at its element's bottom (within `most_px` either way)."""
    page.wait_for_function("(most) => { const gap = (" + FRAME_GAP_JS + ")(); return gap !== null && Math.abs(gap) <= most; }",
                           arg=most_px, timeout=timeout_ms)


def frame_titles(page) -> list[dict]:
    """The open frames' labels, edges and title positions in layout units, with the view's left edge."""
    return page.evaluate(FRAME_TITLES_JS) or []


def nodes(page) -> list[dict]:
    """The graph's drawn nodes as the browser holds them (id, kind, label, module, x, y, shape, fill)."""
    return page.evaluate(NODES_JS) or []


def wait_graph(page, timeout_ms: int = 30_000) -> None:
    """Wait until the Bokeh graph has drawn its nodes."""
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length && "
                           "Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes') && "
                           "Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes').data.id.length > 0",
                           timeout=timeout_ms)
    page.wait_for_selector("canvas", timeout=timeout_ms)


TOOLTIP_JS = """() => { let shown = false; const walk = (root) => { for (const e of root.querySelectorAll('.bk-Tooltip, *')) {
    if (e.classList && e.classList.contains('bk-Tooltip')) { const r = e.getBoundingClientRect();
      if (r.width > 0 && r.height > 0 && getComputedStyle(e).display !== 'none') shown = true; }
    if (e.shadowRoot) walk(e.shadowRoot); } }; walk(document); return shown; }"""


# The first element matching a selector, through Panel's shadow roots (a JS function body's first statement).
FIND_JS = """const find = (root, sel) => { const hit = root.querySelector(sel); if (hit) return hit;
  for (const el of root.querySelectorAll('*')) { if (el.shadowRoot) { const h = find(el.shadowRoot, sel); if (h) return h; } }
  return null; };"""
# Where the words `words` of the status line's last action end on screen, and where its clipped line ends.
WORDS_END_JS = "words => { " + FIND_JS + """ const el = find(document, '.tlx-last-action');
  if (!el || !el.firstChild) return null; const at = el.firstChild.textContent.indexOf(words); if (at < 0) return null;
  const range = document.createRange(); range.setStart(el.firstChild, at); range.setEnd(el.firstChild, at + words.length);
  const line = el.closest('.tlx-summary-text') || el.parentElement;
  return [range.getBoundingClientRect().right, Math.min(line.getBoundingClientRect().right, innerWidth)]; }"""


def status_words_drawn(page, words: str) -> bool:
    """Whether `words` of the status line's last action are drawn inside its one line (which cuts its end)."""
    got = page.evaluate(WORDS_END_JS, words)
    return got is not None and got[0] <= got[1]


def tooltip_shown(page) -> bool:
    """Whether Bokeh's hover tooltip is drawn on the page."""
    return page.evaluate(TOOLTIP_JS)


def hover_node(page, node_id: str) -> None:
    """Rest the pointer on the graph's box `node_id` until its hover tooltip shows."""
    node = next(n for n in nodes(page) if n["id"] == node_id)
    x, y = to_page(page, node["x"], node["y"])
    page.mouse.move(x - 1, y)
    page.mouse.move(x, y)
    page.wait_for_function(TOOLTIP_JS, timeout=10_000)


def click_node(page, node_id: str) -> None:
    """Click the graph's box `node_id` on the canvas, where a person would click."""
    node = next(n for n in nodes(page) if n["id"] == node_id)
    page.mouse.click(*to_page(page, node["x"], node["y"]))


def settle(page) -> None:
    """Wait two animation frames, so a range change reaches the plot's scales and canvas."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def to_page(page, x: float, y: float, timeout_ms: int = 60_000) -> tuple[float, float]:
    """Page pixels of data point (x, y) on the graph, once the plot view exists (waited for in the page)."""
    settle(page)
    got = page.wait_for_function(TO_PAGE_JS, arg=[x, y], timeout=timeout_ms).json_value()
    return got[0], got[1]


def wait_node(page, node_id: str, present: bool = True, timeout_ms: int = 15_000) -> None:
    """Wait until node `node_id` is (or is no longer) drawn."""
    page.wait_for_function(
        "([id, present]) => { const doc = Bokeh.documents[Bokeh.documents.length - 1];"
        " const s = doc.get_model_by_name('tlx-nodes'); return s && (s.data.id.indexOf(id) >= 0) === present; }",
        arg=[node_id, present], timeout=timeout_ms)


def banner_state(page) -> str:
    return page.locator(".tlx-banner").first.get_attribute("data-state")


def shot(page, artifacts_dir: Path, name: str, docs: bool = True) -> Path:
    """Screenshot to the artifacts folder; copied into docs/images/ (for docs/explorer.md) only when
    TLX_UPDATE_DOC_IMAGES=1, so a test run leaves the checkout as it found it."""
    out = Path(artifacts_dir) / f"{name}.png"
    page.screenshot(path=str(out))
    if docs and os.environ.get("TLX_UPDATE_DOC_IMAGES") == "1":
        images = Path(__file__).resolve().parents[2] / "docs" / "images"
        images.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, images / out.name)
    return out
