"""The explorer beside Google's Model Explorer on the same graph, in one run, one browser (issue 36).

    .venv/bin/python tests/bench/bench_vs_model_explorer.py [--pages 5] [--width 1600 --height 1000]

The trace is the embedded default (the weights-free Llama-3.1-8B config); Model Explorer gets this
project's export of it (`exporters.model_explorer.export`), served by its own package through the
guarded front. Pages alternate, ours then theirs, each a fresh page of one headless Chromium
(`--disable-gpu`; Model Explorer draws with WebGL on Chromium's software renderer).

- **load to interactive**: navigation start to the graph ready for input, then two animation frames.
  Ours: the graph's nodes in the page and its plot view mapping clicks. Model Explorer: its node-count
  line ("N nodes") shown, a canvas in the page, and its search box present.
- **expand to an op** (the same user step on both): find layer 0's `q_proj` linear by name and open
  the modules around it. Ours: Enter in the search box until the inspector shows the op (the three
  modules around it opened and drawn). Model Explorer: Alt+click of the search hit until its info
  panel shows the op's namespace (Model Explorer expands the layers to the node and selects it).
  From the input event's timestamp, then two frames.

Prints medians with min-max and the conditions. Targets (a quiet machine of this kind): our load <=
Model Explorer's, our expand <= 0.25x its expand; load <= 2 s, expand <= 250 ms absolute.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.app.conftest import served  # noqa: E402
from tests.bench.bench_app import ARM_JS, page_load_s, search_ms  # noqa: E402
from tests.conftest import CHROMIUM_ARGS  # noqa: E402
from tests.bench._timing import spread  # noqa: E402

ME_READY_JS = """(count) => { const t = document.body ? document.body.innerText : '';
  return t.includes(count + ' nodes') && !!document.querySelector('canvas')
    && !!document.querySelector('input[placeholder^="Search nodes"]'); }"""
ME_SEARCH = 'input[placeholder^="Search nodes"]'


def me_load_s(page, url: str, node_count: int) -> float:
    page.goto(url, wait_until="commit")
    page.wait_for_function(ME_READY_JS, arg=node_count, timeout=120_000)
    painted = page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))")
    return painted / 1000


def me_expand_ms(page, label: str, namespace: str) -> float:
    """Alt+click the first search hit for node label `label` until the info panel names the op's namespace,
    then two frames."""
    box = page.locator(ME_SEARCH)
    box.fill("^" + re.escape(label) + "$")
    hit = page.get_by_text(label, exact=True).filter(visible=True)
    hit.first.wait_for(timeout=60_000)
    page.wait_for_timeout(300)
    before = page.evaluate("(ns) => document.body.innerText.split(ns).length", namespace)
    page.evaluate(ARM_JS, f"() => document.body.innerText.split({json.dumps(namespace)}).length > {before}")
    hit.first.click(modifiers=["Alt"])
    page.wait_for_function("() => window.__tlx_t1 !== null", timeout=60_000)
    return page.evaluate("() => window.__tlx_t1 - window.__tlx_t0")


def shot(page, folder: Path | None, name: str) -> None:
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / name))



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--shots", type=Path, help="save a screenshot of each page after its expand (to check what was timed)")
    ns = ap.parse_args()
    from app.sources import open_default
    from exporters import model_explorer as me

    loaded = open_default()
    trace = loaded.trace
    op = next(o.label for o in trace.ops if o.module == "model.layers.0.self_attn.q_proj")
    folder = Path(tempfile.mkdtemp(prefix="tlx-vs-me-"))
    path = me.export(trace, folder / "llama-8b.json")
    graph = json.loads(path.read_text())["graphs"][0]
    node = next(n for n in graph["nodes"] if n["id"] == op)
    namespace = node["namespace"]
    got: dict[str, list[float]] = {"ours load s": [], "ours expand ms": [], "me load s": [], "me expand ms": []}
    viewport = {"width": ns.width, "height": ns.height}
    me_server = me.serve(path)
    with sync_playwright() as p, served(loaded) as ours_url, me_server:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        me_url = me.open_url(me_server.base_url, path)
        for _ in range(ns.pages):
            page = browser.new_page(viewport=viewport)
            got["ours load s"].append(page_load_s(page, ours_url))
            got["ours expand ms"].append(search_ms(page, op))
            shot(page, ns.shots, f"ours-{len(got['ours load s'])}.png")
            page.close()
            page = browser.new_page(viewport=viewport)
            got["me load s"].append(me_load_s(page, me_url, len(graph["nodes"])))
            got["me expand ms"].append(me_expand_ms(page, node["label"], namespace))
            shot(page, ns.shots, f"model-explorer-{len(got['me load s'])}.png")
            page.close()
        version = browser.version
        browser.close()
    load = os.getloadavg()
    print(f"Llama-3.1-8B default, {len(trace.ops)} ops ({len(graph['nodes'])} Model Explorer nodes); op {op} "
          f"(Model Explorer label {node['label']!r}, namespace {namespace})")
    print("| | this explorer | Model Explorer | ratio (ours / theirs) |")
    print("|---|---:|---:|---:|")
    for what, unit, fmt in (("load", "s", ".2f"), ("expand", "ms", ".0f")):
        ours, theirs = got[f"ours {what} {unit}"], got[f"me {what} {unit}"]
        ratio = statistics.median(ours) / statistics.median(theirs)
        print(f"| {what} ({unit}) | {spread(ours, fmt)} | {spread(theirs, fmt)} | {ratio:.2f} |")
    print(f"\nmedian (min-max) of {ns.pages} fresh pages each, alternating; window {ns.width}x{ns.height}; Chromium "
          f"{version} headless, --disable-gpu; {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"python {platform.python_version()}")
    print("targets: our load <= Model Explorer's and <= 2 s; our expand <= 0.25x Model Explorer's and <= 250 ms")


if __name__ == "__main__":
    main()
