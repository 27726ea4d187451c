"""From `torchlens-explore` to a painted graph, as a user meets it (issue 36 item 1).

    .venv/bin/python tests/bench/bench_startup.py [--runs 5] [--cache warm|cold] [--roots A,B] [ARGS for torchlens-explore ...]

`--cache` (app.default_cache, the embedded default's start-up cache): `warm` (default; a warm install is
the second launch) runs one launch first that is not counted, so the runs read the entry it wrote;
`cold` passes `--fresh`, so every run captures again. Either way the runs use a cache folder of their
own (XDG_CACHE_HOME set to a temporary folder, removed at the end), never the user's.

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
import shutil
import socket
import subprocess
import tempfile
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

PAINT_WAIT_JS = """([minInk, timeoutMs]) => new Promise((resolve, reject) => {
  const ink = """ + INK_JS + """, until = performance.now() + timeoutMs;
  const tick = () => { let n = -1; try { n = ink(); } catch (e) {}
    if (n >= minInk) resolve(performance.timeOrigin + performance.now());
    else if (performance.now() > until) reject(new Error('the graph was not painted in time'));
    else requestAnimationFrame(tick); };
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


def one_run(browser, root: Path, extra: list[str], timeout_s: float, cache_home: str) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "PYTHONPATH": str(root), "XDG_CACHE_HOME": cache_home}
    printed: dict[str, float] = {}
    t0 = time.time()
    proc = subprocess.Popen([str(SCRIPT), "--no-browser", "--port", str(port), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=root)

    def read_output() -> None:
        for line in proc.stdout:
            if "serving on" in line and "printed" not in printed:
                printed["printed"] = time.time()
            if "start-up cache" in line and "cache" not in printed:  # the first such line: app.default_cache's note
                printed["cache"] = "read" if "read the default from the start-up cache" in line else "captured"

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
        t_paint = page.evaluate(PAINT_WAIT_JS, [MIN_INK, timeout_s * 1000]) / 1000.0
        return {"url": t_url - t0, "printed": printed.get("printed", float("nan")) - t0,
                "first_paint": t_content - t0, "painted": t_paint - t0, "cache": printed.get("cache", "-")}
    finally:
        context.close()
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        reader.join(timeout=5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds one run may take")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between runs (the last server exits)")
    ap.add_argument("--roots", default=str(ROOT), help="comma-separated checkouts to run, alternately")
    ap.add_argument("--cache", choices=("warm", "cold"), default="warm",
                    help="warm: one uncounted launch first, the runs read its cache entry; cold: --fresh every run")
    ns, extra = ap.parse_known_args()
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT))
    from tests.bench._timing import spread
    from tests.conftest import CHROMIUM_ARGS

    import bokeh
    import panel
    import torch

    roots = [Path(r).resolve() for r in ns.roots.split(",")]
    load_before = os.getloadavg()
    rows: dict[Path, list[dict[str, float]]] = {r: [] for r in roots}
    cache_home = tempfile.mkdtemp(prefix="tlx-bench-cache-")
    if ns.cache == "cold":
        extra = ["--fresh", *extra]
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            if ns.cache == "warm":
                for root in roots:  # writes the entry the counted runs read (the first launch of an install)
                    r = one_run(browser, root, extra, ns.timeout, cache_home)
                    print(f"priming launch {root} (not counted): painted {r['painted']:.2f} s, cache {r['cache']}",
                          flush=True)
                    time.sleep(ns.pause)
            for i in range(ns.runs):
                for root in roots:
                    try:
                        r = one_run(browser, root, extra, ns.timeout, cache_home)
                    except Exception as exc:  # a run that did not finish is shown, counted as missing
                        print(f"run {i + 1} {root}: did not finish ({type(exc).__name__}: {exc})", flush=True)
                        r = {k: float("nan") for k in ("url", "printed", "first_paint", "painted")} | {"cache": "-"}
                    rows[root].append(r)
                    print(f"run {i + 1} {root}: url {r['url']:.2f} s, printed {r['printed']:.2f} s, first paint "
                          f"{r['first_paint']:.2f} s, painted {r['painted']:.2f} s, cache {r['cache']}", flush=True)
                    time.sleep(ns.pause)
            browser.close()
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"\ntorchlens-explore --no-browser {' '.join(extra) or '(embedded Llama-3.1-8B, weights-free)'}; "
          f"start-up cache {ns.cache}; {ns.runs} runs each; Chromium headless 1366x768; seconds from the spawn, "
          f"median (min-max)")
    print("| checkout | URL answers 200 | URL printed | first paint (any app content) | graph painted (nodes + ink) |")
    print("|---|---:|---:|---:|---:|")
    for root, rs in rows.items():
        print(f"| {root} | {spread([r['url'] for r in rs], count=True)} | {spread([r['printed'] for r in rs], count=True)} "
              f"| {spread([r['first_paint'] for r in rs], count=True)} | {spread([r['painted'] for r in rs], count=True)} |")
    print(f"\nconditions: {os.cpu_count()} CPUs, load average {load_before[0]:.2f} before / {load_after[0]:.2f} after "
          f"(1 min); Python {platform.python_version()}, torch {torch.__version__}, panel {panel.__version__}, "
          f"bokeh {bokeh.__version__}; {platform.platform()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
