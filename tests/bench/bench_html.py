"""Self-contained HTML export: write time, file size, and in Chromium load-to-ready and expand/collapse.

Run: `python tests/bench/bench_html.py [--repeats 3]`. Rows: tiny GPT-2 (values saved), GPT-2 small
and Llama-3.1-8B weights-free from the shipped configs (input 1x8). Times are medians with the
range over the runs; the browser figures come from fresh pages opened from disk with the network
blocked, measured in the page with performance.now() until the second animation frame after the
action; the notebook figure runs `tracer.explore(trace)` and sets its cell output into a fresh page.
Prints a markdown table (docs/html.md).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import tracer  # noqa: E402
from exporters.html import write_html  # noqa: E402
from tests.models import tiny_gpt2  # noqa: E402
from tracer.bridges.transformers import trace_config  # noqa: E402
from tests.bench._timing import spread  # noqa: E402

PAINT_JS = """([selector, event]) => new Promise(r => { const t0 = performance.now();
  document.querySelector(selector).dispatchEvent(new MouseEvent(event, {bubbles: true}));
  requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now() - t0))); })"""



def browser_figures(path: Path, pages: int, layers: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    out = {"load_s": [], "expand_ms": [], "collapse_ms": []}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        for i in range(pages):
            page = b.new_page(viewport={"width": 1600, "height": 1000})
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
            start = time.perf_counter()
            page.goto(path.as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            out["load_s"].append(time.perf_counter() - start)
            if i == 0:
                for n in range(layers):
                    out["expand_ms"].append(page.evaluate(PAINT_JS, [f"g.node[data-id='mod:model.layers.{n}']", "dblclick"]))
                    out["collapse_ms"].append(page.evaluate(PAINT_JS, ["#crumbs a:nth-of-type(3)", "click"]))
            page.close()
        b.close()
    return out


def notebook_figures(trace, pages: int) -> list[float]:
    """Seconds from the cell's call (`tracer.explore(trace)` and its rich display) until the inline
    explorer is ready in a Chromium page holding the cell output (network refused)."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        for _ in range(pages):
            page = b.new_page(viewport={"width": 1600, "height": 1000})
            page.route("**/*", lambda r: r.abort())
            start = time.perf_counter()
            cell = tracer.explore(trace)._repr_html_()
            page.set_content(f"<html><body>{cell}</body></html>")
            page.frame_locator("iframe.tlx-explorer").locator("body[data-ready='1']").wait_for(timeout=60_000)
            out.append(time.perf_counter() - start)
            page.close()
        b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pages", type=int, default=5)
    args = ap.parse_args()
    cases = [
        ("tiny GPT-2 (2 layers, values saved)", lambda: tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))),
        ("GPT-2 small, weights-free", lambda: trace_config("gpt2", input_shape=(1, 8))),
        ("Llama-3.1-8B, weights-free", lambda: trace_config("llama-3.1-8b", input_shape=(1, 8))),
    ]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{args.repeats} writes each; load average at start {os.getloadavg()[0]:.1f}\n")
    print("| trace | ops | bytes | write s, median (range) | CPU s of the write, median (range) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        last = last_trace = None
        for name, build in cases:
            trace = build()
            path = Path(tmp) / f"{len(trace.ops)}.html"
            times, cpu = [], []
            for _ in range(args.repeats):
                start, start_cpu = time.perf_counter(), time.process_time()
                write_html(trace, path)
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            print(f"| {name} | {len(trace.ops):,} | {path.stat().st_size:,} | {spread(times)} | {spread(cpu)} |",
                  flush=True)
            last, last_trace = path, trace
        fig = browser_figures(last, args.pages, 8)
        print(f"\n8B page in Chromium: load to ready {spread(fig['load_s'])} s over {args.pages} fresh pages; "
              f"expand a layer {spread(fig['expand_ms'], '.0f')} ms, collapse {spread(fig['collapse_ms'], '.0f')} ms "
              f"(8 layers, click to second animation frame)")
        cell = notebook_figures(last_trace, args.pages)
        print(f"8B notebook cell (tracer.explore(trace) to the inline explorer ready in Chromium): "
              f"{spread(cell)} s over {args.pages} fresh pages")
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)")


if __name__ == "__main__":
    main()
