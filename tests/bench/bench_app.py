"""Explorer responsiveness in Chromium, as a user sees it: until the canvas has painted.

    .venv/bin/python tests/bench/bench_app.py [--pages 5] [--clicks 3] [--skip-405b] [--skip-long]

For each case, `--pages` fresh pages (a new browser page each, same server):
- load to interactive: navigation start to the graph's nodes in the page, its plot view mapping
  clicks, and two animation frames after that (the canvas has painted);
- expand / collapse click-to-paint: from the pointerdown event's timestamp to the frame after the
  changed node data arrived (polled every animation frame in the page; a second frame is awaited so
  the redraw has reached the screen);
- search to inspector: from the Enter keydown to the inspector showing the op (then two frames).
Server-side spans (the click handler with its layout, figure_data, the document update) are read
from the app's `tlx.timing` log. Less sensitive to a busy machine, the page's own costs are read too:
its main-thread task and script time (Chromium's Performance.getMetrics) over the load and over each
expand click, the script bytes it loaded, and the websocket bytes of the first document and of each
expand. Prints medians with min-max over all samples and the conditions.
"""
from __future__ import annotations

import argparse
import logging
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.app import pagekit  # noqa: E402
from tests.app.conftest import served  # noqa: E402
from tests.conftest import CHROMIUM_ARGS  # noqa: E402
from tests.bench._timing import spread  # noqa: E402

# Record the timestamp of the next pointerdown / Enter keydown, then poll every frame until `ready()`
# holds, wait two more frames, and keep performance.now() as the painted time.
ARM_JS = """(ready) => {
  window.__tlx_t0 = null; window.__tlx_t1 = null; window.__tlx_seen = null; window.__tlx_tap = null;
  const f = new Function('return (' + ready + ')();');
  const start = (e) => { if (window.__tlx_t0 === null && (e.type === 'pointerdown' || e.key === 'Enter')) window.__tlx_t0 = e.timeStamp; };
  document.addEventListener('pointerdown', start, {capture: true, once: true});
  document.addEventListener('keydown', start, {capture: true});
  const poll = () => {
    if (window.__tlx_t0 !== null && f()) {
      window.__tlx_seen = performance.now();
      requestAnimationFrame(() => requestAnimationFrame(() => { window.__tlx_t1 = performance.now(); }));
      return;
    }
    requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
}"""

NODE_PRESENT = """() => { const s = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes');
  return s && (s.data.id.indexOf(%r) >= 0) === %s; }"""

INSPECTOR_SHOWS = """() => { const hit = []; const walk = (root) => { for (const e of root.querySelectorAll('*')) {
    if (e.classList && e.classList.contains('tlx-inspector')) hit.push(e); if (e.shadowRoot) walk(e.shadowRoot); } };
  walk(document); return hit.some(e => e.textContent.includes(%r)); }"""

FRAME_HEADER_JS = """(a) => { const d = Bokeh.documents[Bokeh.documents.length - 1];
  const r = [...d._all_models.values()].find(m => m.name === 'frames'); const s = r.data_source.data;
  const i = s.address.indexOf(a); return [s.right[i] - 4, s.top[i] + 4]; }"""


RESPONSE: list[float] = []  # per page: seconds to the first byte of the page (the server builds the session first)
SEEN: list[float] = []  # per measurement: ms from the input event to the change seen in the page (rest: painting)
TAPS: list[float] = []  # per click: ms from pointerdown to Bokeh's tap event in the page


def elapsed_ms(page) -> float:
    page.wait_for_function("() => window.__tlx_t1 !== null", timeout=60_000)
    total, seen, tap = page.evaluate("() => [window.__tlx_t1 - window.__tlx_t0, window.__tlx_seen - window.__tlx_t0,"
                                     " window.__tlx_tap === null ? null : window.__tlx_tap - window.__tlx_t0]")
    SEEN.append(seen)
    if tap is not None:
        TAPS.append(tap)
    return total


# Counts the websocket bytes the page receives (installed before the page's own scripts run).
WS_BYTES_JS = """window.__tlx_ws = 0; const Native = window.WebSocket;
window.WebSocket = function (...args) { const s = new Native(...args);
  s.addEventListener('message', (e) => { window.__tlx_ws += typeof e.data === 'string' ? e.data.length : (e.data.byteLength || e.data.size || 0); });
  return s; };
window.WebSocket.prototype = Native.prototype;"""
METRICS = ("TaskDuration", "ScriptDuration")
COSTS: dict[str, list[float]] = {}  # page costs: load/expand task and script ms, script KB, websocket KB


def page_metrics(cdp) -> dict[str, float]:
    """Chromium's cumulative main-thread durations for the page, in ms."""
    return {m["name"]: m["value"] * 1000 for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] in METRICS}


def cost(name: str, value: float) -> None:
    COSTS.setdefault(name, []).append(value)


def page_load_s(page, url: str) -> float:
    """Seconds from navigation start to the graph painted and answering clicks."""
    page.add_init_script(WS_BYTES_JS)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.tlx_cdp = cdp
    page.goto(url, wait_until="commit")
    pagekit.wait_graph(page, timeout_ms=60_000)
    pagekit.to_page(page, 0.0, 0.0)
    painted = page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))")
    RESPONSE.append(page.evaluate("() => performance.getEntriesByType('navigation')[0].responseStart") / 1000)
    for k, v in page_metrics(cdp).items():
        cost(f"load {k} ms", v)
    cost("load script KB", page.evaluate("() => performance.getEntriesByType('resource').filter(e => /[.]js([?]|$)/.test(e.name))"
                                         ".reduce((a, e) => a + e.decodedBodySize, 0)") / 1024)
    cost("load websocket KB", page.evaluate("() => window.__tlx_ws") / 1024)
    return painted / 1000


def click_ms(page, node_xy, node_id: str, present: bool) -> float:
    page.wait_for_timeout(600)  # outside Bokeh's double-tap window
    page.evaluate(ARM_JS, NODE_PRESENT % (node_id, "true" if present else "false"))
    page.mouse.click(*node_xy)
    return elapsed_ms(page)


def search_ms(page, label: str) -> float:
    box = page.locator(".tlx-search input")
    box.fill(label)
    page.evaluate(ARM_JS, INSPECTOR_SHOWS % f"Op {label}")
    box.press("Enter")
    return elapsed_ms(page)


class Spans(logging.Handler):
    """Collects the app's server-side timing lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def medians(self) -> dict[str, float]:
        out: dict[str, list[float]] = {}
        for line in self.lines:
            m = re.match(r"(\w+) ([\d.]+) ms", line)
            if m:
                out.setdefault(m.group(1), []).append(float(m.group(2)))
            m = re.search(r"layout ([\d.]+) ms", line)
            if m:
                out.setdefault("layout", []).append(float(m.group(1)))
        return {k: statistics.median(v) for k, v in out.items()}


def measure(browser, url: str, box: str, frame: str, op_label: str, pages: int, clicks: int) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {"load_s": [], "expand_ms": [], "collapse_ms": [], "search_ms": []}
    for _ in range(pages):
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        got["load_s"].append(page_load_s(page, url))
        SEEN.clear()
        TAPS.clear()
        for _ in range(clicks):
            node = next(n for n in pagekit.nodes(page) if n["id"] == box)
            before, ws = page_metrics(page.tlx_cdp), page.evaluate("() => window.__tlx_ws")
            got["expand_ms"].append(click_ms(page, pagekit.to_page(page, node["x"], node["y"]), box, present=False))
            page.wait_for_timeout(800)  # the rest of the answer (status line, inspector) has arrived
            for k, v in page_metrics(page.tlx_cdp).items():
                cost(f"expand {k} ms", v - before[k])
            cost("expand websocket KB", (page.evaluate("() => window.__tlx_ws") - ws) / 1024)
            header = page.evaluate(FRAME_HEADER_JS, frame)
            got["collapse_ms"].append(click_ms(page, pagekit.to_page(page, *header), box, present=True))
        got.setdefault("click_seen_ms", []).extend(SEEN)
        got.setdefault("tap_ms", []).extend(TAPS)
        got["search_ms"].append(search_ms(page, op_label))
        page.close()
    got["response_s"] = list(RESPONSE)
    got["costs"] = dict(COSTS)
    RESPONSE.clear()
    COSTS.clear()
    return got



def layer_picks(box: str, frame: str):
    """A Llama page's picks: the box to expand, the frame it opens, and an op to search (layer 0's q_proj)."""
    return lambda loaded: (box, frame, next(o.label for o in loaded.trace.ops
                                            if o.module == "model.layers.0.self_attn.q_proj"))


def span_picks(loaded) -> tuple[str, str, str]:
    """The long loop's picks: its third span (box and frame) and an op halfway through the forward."""
    from exporters.layout.groups import ROOT, GroupTree

    tree = GroupTree(loaded.trace)
    span = tree.groups[ROOT].children[2]
    return f"mod:{span[0]}", span[0], loaded.trace.ops[len(loaded.trace.ops) // 2].label


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--clicks", type=int, default=3, help="expand+collapse pairs per page")
    ap.add_argument("--skip-405b", action="store_true")
    ap.add_argument("--skip-long", action="store_true", help="leave out the 100,002-op loop")
    ns = ap.parse_args()
    from app.sources import open_config, open_default

    spans = Spans()
    timing = logging.getLogger("tlx.timing")
    timing.setLevel(logging.DEBUG)
    timing.addHandler(spans)
    cases = [("Llama-3.1-8B default (32 layers)", open_default, layer_picks("mod:model.layers.3", "model.layers.3"))]
    if not ns.skip_405b:
        cases.append(("Llama-3.1-405B (126 layers, folded)", lambda: open_config("llama-3.1-405b"),
                      layer_picks("fold:model.layers.0", "model.layers.0")))
    if not ns.skip_long:
        from app.factory import open_factory

        cases.append(("100,002-op loop (one forward's own ops, in spans)",
                      lambda: open_factory("tests.models:op_dense_loop", (2, 4)), span_picks))
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for name, load, picks in cases:
            t = time.perf_counter()
            loaded = load()
            capture_s = time.perf_counter() - t
            box, frame, op = picks(loaded)
            spans.lines.clear()
            with served(loaded) as url:
                r = measure(browser, url, box, frame, op, ns.pages, ns.clicks)
            rows.append((name, capture_s, r, spans.medians()))
        browser.close()
    print("\n| page | capture before serving (s) | load to interactive (s) | expand click-to-paint (ms) "
          "| collapse click-to-paint (ms) | search to inspector (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, capture_s, r, _ in rows:
        print(f"| {name} | {capture_s:.2f} | {spread(r['load_s'], '.2f')} | {spread(r['expand_ms'], '.0f')} "
              f"| {spread(r['collapse_ms'], '.0f')} | {spread(r['search_ms'], '.0f')} |")
    print("\nload, navigation start to the page's first byte (the server has built the session's page):")
    for name, _, r, _ in rows:
        print(f"  {name}: {spread(r['response_s'], '.2f')} s")
    print("\nclicks, input event to the new data seen in the page (the rest of click-to-paint is two frames of painting):")
    for name, _, r, _ in rows:
        print(f"  {name}: {spread(r['click_seen_ms'], '.0f')} ms; of which pointerdown to Bokeh's tap event "
              f"{spread(r['tap_ms'], '.0f') if r['tap_ms'] else '-'} ms")
    print("\nthe page's own costs (main-thread task and script time from Chromium's metrics; bytes):")
    for name, _, r, _ in rows:
        print(f"  {name}: " + "; ".join(f"{k} {spread(v, '.0f')}" for k, v in r["costs"].items()))
    print("\nserver-side medians (ms) per case:")
    for name, _, _, med in rows:
        print(f"  {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(med.items())))
    load = os.getloadavg()
    print(f"\nmedian (min-max) of {ns.pages} fresh pages; clicks: {ns.clicks} expand/collapse pairs per page; "
          f"window 1600x1000; Chromium {browser.version if hasattr(browser, 'version') else ''} headless, --disable-gpu; "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print("targets: load <= 2 s (8B), expand/collapse <= 250 ms, search to inspector <= 200 ms")


if __name__ == "__main__":
    main()
