"""Explorer responsiveness, measured in Chromium: page load to interactive graph, and one expand
and one collapse click, for the default 8B weights-free page and a 126-layer 405B-class page.

    .venv/bin/python tests/bench/bench_app.py [--runs 5] [--skip-405b]

Prints a markdown table of medians. "Interactive" means the graph's node data is in the page and
its plot view can map clicks (the canvas is drawn). Click times run from the mouse click to the
changed node data arriving in the browser (performance.now() in the page). Targets: interactive
within 3 s of the server being up; expand/collapse within 300 ms; 405B responsive by folding.
"""
from __future__ import annotations

import argparse
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

INTERACTIVE_JS = """() => { if (!window.Bokeh || !Bokeh.documents.length) return false;
  const s = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes');
  return !!(s && s.data.id.length && document.querySelector('body')); }"""

CHANGED_JS = """([id, present]) => { const d = Bokeh.documents[Bokeh.documents.length - 1];
  const s = d.get_model_by_name('tlx-nodes');
  return (s && (s.data.id.indexOf(id) >= 0) === present) ? performance.now() : false; }"""


def page_load(page, url: str) -> float:
    """Seconds from navigation start to a drawn, clickable graph (measured in the page)."""
    page.goto(url, wait_until="commit")
    page.wait_for_function(INTERACTIVE_JS, timeout=60_000)
    pagekit.to_page(page, 0.0, 0.0)  # the plot view exists and maps coordinates
    return page.evaluate("() => performance.now()") / 1000.0


def click_ms(page, x: float, y: float, node_id: str, present: bool) -> float:
    """Milliseconds from a canvas click to node `node_id` appearing/disappearing in the page."""
    page.wait_for_timeout(600)  # outside Bokeh's double-tap window
    t0 = page.evaluate("() => performance.now()")
    page.mouse.click(x, y)
    t1 = page.wait_for_function(CHANGED_JS, arg=[node_id, present], timeout=30_000, polling="raf").json_value()
    return t1 - t0


def measure(browser, url: str, box: str, frame_address: str, runs: int) -> dict[str, float]:
    loads, expands, collapses = [], [], []
    for _ in range(runs):
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        loads.append(page_load(page, url))
        node = next(n for n in pagekit.nodes(page) if n["id"] == box)
        expands.append(click_ms(page, *pagekit.to_page(page, node["x"], node["y"]), box, present=False))
        frame = page.evaluate("""(a) => { const d = Bokeh.documents[Bokeh.documents.length - 1];
            const r = [...d._all_models.values()].find(m => m.name === 'frames'); const s = r.data_source.data;
            const i = s.address.indexOf(a); return [s.right[i] - 4, s.top[i] + 4]; }""", frame_address)
        collapses.append(click_ms(page, *pagekit.to_page(page, *frame), box, present=True))
        page.close()
    return {"load_s": statistics.median(loads), "expand_ms": statistics.median(expands),
            "collapse_ms": statistics.median(collapses)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-405b", action="store_true")
    ns = ap.parse_args()
    from app.sources import open_config, open_default

    cases = []
    t = time.perf_counter()
    cases.append(("Llama-3.1-8B default (32 layers)", open_default(), "mod:model.layers.3", "model.layers.3",
                  time.perf_counter() - t))
    if not ns.skip_405b:
        t = time.perf_counter()
        cases.append(("Llama-3.1-405B (126 layers, folded)", open_config("llama-3.1-405b"), "fold:model.layers.0",
                      "model.layers.0", time.perf_counter() - t))
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for name, loaded, box, frame, capture_s in cases:
            with served(loaded) as url:
                r = measure(browser, url, box, frame, ns.runs)
            rows.append((name, capture_s, r))
        browser.close()
    print(f"\n| page | capture before serving (s) | load to interactive (s) | expand click (ms) | collapse click (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, capture_s, r in rows:
        print(f"| {name} | {capture_s:.2f} | {r['load_s']:.2f} | {r['expand_ms']:.0f} | {r['collapse_ms']:.0f} |")
    print(f"\nmedians of {ns.runs} fresh pages each; targets: load <= 3 s, expand/collapse <= 300 ms")


if __name__ == "__main__":
    main()
