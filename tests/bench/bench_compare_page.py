"""The Compare tab in Chromium as a user sees it: Compare click until the coloured graph has painted,
and a tolerance change until the recoloured graph has painted.

Run: `python tests/bench/bench_compare_page.py [--pages 3] [--model tests.models:tiny_gpt2]`. The app is
served in this process on loopback for a `--model` factory (default: GPT-2 small with random weights,
input 1x16); each fresh page opens the Compare tab, picks the bfloat16 twin and clicks Compare (the
twin's capture and the diff run on the server; the figure is what arrives until it has painted), then
types a new tolerance (recolour). Times: `performance.now()` in the page from the click (or the input's
change) until the compare graph's fill column has changed and two animation frames have passed;
medians with the range over the pages. Prints a markdown row (docs/benchmarks.md, diff section).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.app.conftest import served  # noqa: E402
from tests.bench._timing import spread  # noqa: E402

FILLS_JS = """() => { const d = Bokeh.documents[Bokeh.documents.length - 1];
  const r = [...d._all_models.values()].filter(m => m.name === 'nodes' && m.data_source.data.fill);
  const last = r[r.length - 1]; return last ? JSON.stringify(last.data_source.data.fill) : ''; }"""

WAIT_CHANGE_JS = """([before, t0]) => new Promise(resolve => {
  const read = () => { const d = Bokeh.documents[Bokeh.documents.length - 1];
    const r = [...d._all_models.values()].filter(m => m.name === 'nodes' && m.data_source.data.fill);
    const last = r[r.length - 1]; return last ? JSON.stringify(last.data_source.data.fill) : ''; };
  const tick = () => { if (read() !== before && read() !== '') {
      requestAnimationFrame(() => requestAnimationFrame(() => resolve(performance.now() - t0))); }
    else { setTimeout(tick, 5); } };
  tick(); })"""



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--model", default="tests.bench.bench_compare_page:gpt2_small")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from app.factory import open_factory

    compare_ms, recolour_ms = [], []
    with served(open_factory(args.model, (1, 16))) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        for _ in range(args.pages):
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(url)
            page.locator(".tlx-banner").wait_for(timeout=60_000)
            page.locator(".bk-tab", has_text="Compare").click()
            page.locator(".tlx-compare-against select").select_option("bfloat16 twin of this model")
            before = page.evaluate(FILLS_JS)
            t0 = page.evaluate("() => performance.now()")
            page.locator(".tlx-compare-run button").click()
            compare_ms.append(page.evaluate(WAIT_CHANGE_JS, [before, t0]))
            for rtol in ("0.5", "1e-6"):
                before = page.evaluate(FILLS_JS)
                box = page.locator(".tlx-compare-rtol input")
                box.fill(rtol)
                t0 = page.evaluate("() => performance.now()")
                box.press("Enter")
                recolour_ms.append(page.evaluate(WAIT_CHANGE_JS, [before, t0]))
            page.close()
        browser.close()
    load = os.getloadavg()[0]
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f}, {args.pages} fresh pages, {args.model}")
    print("| Compare click -> coloured graph painted (twin capture + diff + draw), ms | tolerance change -> recoloured, ms |")
    print("|---|---|")
    print(f"| {spread(compare_ms, '.0f')} | {spread(recolour_ms, '.0f')} |")


def gpt2_small():
    """GPT-2 small (random weights, seeded), the benchmark's default model."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config()).eval()


if __name__ == "__main__":
    main()
