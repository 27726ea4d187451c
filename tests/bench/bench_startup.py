"""From `torchlens-explore` to a painted graph, as a user meets it (issue 36 item 1).

    .venv/bin/python tests/bench/bench_startup.py [--runs 5] [--roots A,B] [ARGS for torchlens-explore ...]

`--roots` takes checkouts (e.g. `git archive` of two commits, each with its C kernel built in place)
and alternates their runs, so load on a shared machine falls on both alike; default: this checkout.

Each run spawns the installed console script (`--no-browser --port P`, a port chosen free just
before, plus ARGS; default: none, the embedded weights-free Llama-3.1-8B config) and times, from the
spawn:
- url: the URL first answers a GET of `/` with HTTP 200 (polled every 20 ms);
- printed: the "serving on" line appears on the script's output;
- first paint: the page (opened in headless Chromium at 1366x768 the moment the URL answers)
  shows any content of the app (the progress page or the explorer);
- painted: the graph is on the canvas: the page's `tlx-nodes` source holds nodes AND the graph's
  main canvas (not the overview) holds at least `MIN_INK` pixels that are not white inside its plot
  frame (read back with getImageData in the page, polled every animation frame).
Chromium is launched before the runs (its start is not the command's cost); each run uses a fresh
page in a fresh context. Prints every run, medians with min-max, and the conditions (CPU count,
load average before and after, versions).
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "torchlens-explore"
MIN_INK = 200  # non-white pixels in the graph's frame: a few boxes with their labels

# The graph's main plot view (not the overview), its primary canvas layer, and the count of inked
# pixels in its frame; -1 while the nodes or the view are not there yet.
INK_JS = """() => {
  if (!window.Bokeh || !Bokeh.documents.length) return -1;
  const doc = Bokeh.documents[Bokeh.documents.length - 1];
  const src = doc.get_model_by_name('tlx-nodes');
  if (!src || !src.data.id || !src.data.id.length) return -1;
  const seen = new Set(), stack = [...(Bokeh.index.roots || [])];
  let view = null;
  while (stack.length && !view) {
    const v = stack.pop();
    if (!v || seen.has(v)) continue;
    seen.add(v);
    if (v.model && (v.model.type === 'Figure' || v.model.type === 'Plot') && v.canvas_view
        && v.model.name !== 'tlx-overview') { view = v; break; }
    try { for (const c of v.children()) stack.push(c); } catch (e) {}
  }
  if (!view) return -1;
  const canvas = view.canvas_view.primary.canvas, f = view.frame.bbox;
  const r = canvas.width / Math.max(1, view.canvas_view.bbox.width);
  const w = Math.floor(f.width * r), h = Math.floor(f.height * r);
  if (w < 2 || h < 2) return 0;
  const px = canvas.getContext('2d').getImageData(Math.floor(f.left * r), Math.floor(f.top * r), w, h).data;
  let ink = 0;
  for (let i = 0; i < px.length; i += 4)
    if (px[i + 3] > 128 && (255 - px[i]) + (255 - px[i + 1]) + (255 - px[i + 2]) > 60) ink++;
  return ink;
}"""

PAINT_WAIT_JS = """(minInk) => new Promise((resolve) => {
  const ink = """ + INK_JS + """;
  const tick = () => { let n = -1; try { n = ink(); } catch (e) {}
    if (n >= minInk) resolve(performance.timeOrigin + performance.now()); else requestAnimationFrame(tick); };
  tick();
})"""

CONTENT = ".tlx-progress, .tlx-page, .tlx-refusal"  # Playwright's selector reaches into Bokeh's shadow roots


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_url(url: str, proc: subprocess.Popen, deadline: float) -> float:
    """time.time() at the first 200 answer of `url`."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the script exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return time.time()
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.02)
    raise RuntimeError("the URL never answered")


def one_run(browser, root: Path, extra: list[str], timeout_s: float) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "PYTHONPATH": str(root)}
    printed: dict[str, float] = {}
    t0 = time.time()
    proc = subprocess.Popen([str(SCRIPT), "--no-browser", "--port", str(port), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=root)

    def read_output() -> None:
        for line in proc.stdout:
            if "serving on" in line and "printed" not in printed:
                printed["printed"] = time.time()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        deadline = time.monotonic() + timeout_s
        t_url = wait_url(url, proc, deadline)
        page = context.new_page()
        page.goto(url, wait_until="commit")
        page.wait_for_selector(CONTENT, state="visible", timeout=timeout_s * 1000)
        t_content = time.time()
        t_paint = page.evaluate(PAINT_WAIT_JS, MIN_INK) / 1000.0
        return {"url": t_url - t0, "printed": printed.get("printed", float("nan")) - t0,
                "first_paint": t_content - t0, "painted": t_paint - t0}
    finally:
        context.close()
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        reader.join(timeout=5)


def spread(values: list[float]) -> str:
    good = [v for v in values if v == v]
    if not good:
        return "-"
    return f"{statistics.median(good):.2f} ({min(good):.2f}-{max(good):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds one run may take")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between runs (the last server exits)")
    ap.add_argument("--roots", default=str(ROOT), help="comma-separated checkouts to run, alternately")
    ns, extra = ap.parse_known_args()
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT))
    from tests.conftest import CHROMIUM_ARGS

    import bokeh
    import panel
    import torch

    roots = [Path(r).resolve() for r in ns.roots.split(",")]
    load_before = os.getloadavg()
    rows: dict[Path, list[dict[str, float]]] = {r: [] for r in roots}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for i in range(ns.runs):
            for root in roots:
                r = one_run(browser, root, extra, ns.timeout)
                rows[root].append(r)
                print(f"run {i + 1} {root}: url {r['url']:.2f} s, printed {r['printed']:.2f} s, first paint "
                      f"{r['first_paint']:.2f} s, painted {r['painted']:.2f} s", flush=True)
                time.sleep(ns.pause)
        browser.close()
    load_after = os.getloadavg()
    print(f"\ntorchlens-explore --no-browser {' '.join(extra) or '(embedded Llama-3.1-8B, weights-free)'}; "
          f"{ns.runs} runs each; Chromium headless 1366x768; seconds from the spawn, median (min-max)")
    print("| checkout | URL answers 200 | URL printed | first paint (any app content) | graph painted (nodes + ink) |")
    print("|---|---:|---:|---:|---:|")
    for root, rs in rows.items():
        print(f"| {root} | {spread([r['url'] for r in rs])} | {spread([r['printed'] for r in rs])} "
              f"| {spread([r['first_paint'] for r in rs])} | {spread([r['painted'] for r in rs])} |")
    print(f"\nconditions: {os.cpu_count()} CPUs, load average {load_before[0]:.2f} before / {load_after[0]:.2f} after "
          f"(1 min); Python {platform.python_version()}, torch {torch.__version__}, panel {panel.__version__}, "
          f"bokeh {bokeh.__version__}; {platform.platform()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
