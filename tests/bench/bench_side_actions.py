"""The explorer's side actions as a user sees them: from the click to the result in view (issue 36 item 5).

    .venv/bin/python tests/bench/bench_side_actions.py [--runs 5] [--root DIR] [--width 1366 --height 768]
                                                       [--actions doctor,estimate,download,open,expand] [--shots DIR]

The server is the real console script (`torchlens-explore --no-browser`, the embedded 8B default) of the
code in `--root` (default: this checkout; pass an exported older commit for a before/after pair), in its
own process. Each run is a fresh Chromium page (`--disable-gpu`), loaded until the graph is interactive
and the side tabs are in the page, then every action once, in order:

- **doctor**: the Doctor tab, "Run the doctor", until its first row is drawn inside the window;
- **estimate**: the Discharge tab's "Estimate memory", until the status line holds the estimate and lies
  inside the window (its bounding box within the viewport; "in view" is printed per run);
- **download**: the Export tab's "Model Explorer JSON", until the browser has the download; beside it,
  the same file written in this process (`exporters.model_explorer.backward.export_graphs` of the same
  trace), timed N times: the ratio is download / in-process;
- **open**: "Open in Model Explorer", until its link shows, then that link opened in a new page until
  Model Explorer's graph canvas and search box are in it ("to the served page");
- **expand**: the breadcrumb's "Expand all", until the status line answers (opened or refused), and
  what it said; "in view" for a refusal: its remedy ("Open fewer modules") is drawn inside the one-line
  status, which cuts the rest with an ellipsis (the whole text is the line's tooltip).

Times are wall seconds from the click, read here (the results take seconds, the polling is per frame).
Prints medians with min-max and n, and the machine's load; no figure is asserted anywhere.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.app import pagekit  # noqa: E402
from tests.conftest import CHROMIUM_ARGS  # noqa: E402
from tests.bench._timing import spread  # noqa: E402

ACTIONS = ("doctor", "estimate", "download", "open", "expand")
# The first element matching a selector (through shadow roots): its box, whether it lies inside the window,
# and its text (shadow content included, as bench_sessions.DEEP_TEXT reads it).
IN_VIEW = """sel => { const walk = root => { const hit = root.querySelector(sel); if (hit) return hit;
  for (const el of root.querySelectorAll('*')) { if (el.shadowRoot) { const h = walk(el.shadowRoot); if (h) return h; } }
  return null; };
  const text = n => n.shadowRoot ? [...n.shadowRoot.childNodes].map(text).join('') :
    (n.nodeType === 3 ? n.textContent : [...(n.childNodes || [])].map(text).join(''));
  const el = walk(document); if (!el) return null; const r = el.getBoundingClientRect();
  return {text: text(el), inside: r.height > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth}; }"""


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    """`torchlens-explore --no-browser` (the embedded default) of the code in `root`; returns it and its URL."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
                             "--no-browser"], cwd=str(root), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in proc.stdout:
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if found:
            return proc, found.group(1)
    raise SystemExit(f"the server did not start (status {proc.poll()})")


def in_view(page, css: str) -> dict | None:
    return page.evaluate(IN_VIEW, css)


def wait_in_view(page, css: str, contains: str = "", timeout_s: float = 180.0) -> dict:
    """Poll until the element `css` holds `contains` and lies inside the window (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = in_view(page, css)
        if got and contains in (got["text"] or "") and got["inside"]:
            return got
        if time.monotonic() > deadline:
            return got or {"inside": False, "text": ""}
        page.wait_for_timeout(50)


def tab(page, title: str) -> None:
    page.locator(".bk-tab", has_text=title).click()


def click(page, css: str) -> None:
    page.locator(f".{css} button, .{css} a").first.click()


def doctor_s(page) -> tuple[float, bool]:
    tab(page, "Doctor")
    page.locator(".tlx-doctor-run button").wait_for(timeout=60_000)
    t0 = time.perf_counter()
    click(page, "tlx-doctor-run")
    got = wait_in_view(page, ".tlx-doctor-row")
    return time.perf_counter() - t0, got["inside"]


def estimate_s(page) -> tuple[float, bool]:
    tab(page, "Discharge")
    page.locator(".tlx-estimate button:not([disabled])").wait_for(timeout=60_000)
    t0 = time.perf_counter()
    click(page, "tlx-estimate")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # the estimate's words, anywhere in the status (in view or not)
        got = in_view(page, ".tlx-discharge-status")
        if got and ("Estimate:" in got["text"] or "Refused" in got["text"]):
            return time.perf_counter() - t0, got["inside"] and "Estimate:" in got["text"]
        page.wait_for_timeout(50)
    return float("nan"), False


def download_s(page) -> tuple[float, bool]:
    tab(page, "Export")
    button = page.locator(".tlx-export-me button, .tlx-export-me a").first
    button.wait_for(timeout=60_000)
    with page.expect_download(timeout=180_000) as info:
        t0 = time.perf_counter()
        button.click()
    info.value.path()
    return time.perf_counter() - t0, True


def open_s(page, context) -> tuple[float, bool]:
    tab(page, "Export")
    page.locator(".tlx-open-me button").wait_for(timeout=60_000)
    t0 = time.perf_counter()
    click(page, "tlx-open-me")
    link = page.locator(".tlx-me-href")
    link.wait_for(timeout=180_000)
    href = link.get_attribute("href")
    me = context.new_page()
    try:
        me.goto(href, wait_until="commit")
        me.wait_for_function("() => !!document.querySelector('canvas') && "
                             "!!document.querySelector('input[placeholder^=\"Search nodes\"]')", timeout=180_000)
        return time.perf_counter() - t0, True
    finally:
        me.close()


def expand_s(page) -> tuple[float, bool, str]:
    before = (in_view(page, ".tlx-last-action") or {}).get("text", "")
    t0 = time.perf_counter()
    page.locator("[data-tlx-act='view:expand-all']").first.click()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        got = in_view(page, ".tlx-last-action") or {}
        text = got.get("text") or ""
        if text != before and any(word in text for word in ("Opened every", "Expand all", "Not drawn")):
            # in view: the start of the answer, and a refusal's remedy, are drawn inside the one-line status
            # (which cuts its end with an ellipsis; the whole text is the line's tooltip)
            seen = (got["inside"] if "Not drawn" not in text
                    else pagekit.status_words_drawn(page, "Open fewer modules"))
            return time.perf_counter() - t0, seen, text
        page.wait_for_timeout(50)
    return float("nan"), False, ""


def in_process_export_s(runs: int) -> list[float]:
    """The Model Explorer JSON the download delivers (`export_graphs` of the default trace), in this process."""
    from app.sources import open_default
    from exporters.model_explorer.backward import export_graphs

    trace = open_default().trace
    out = Path(tempfile.mkdtemp(prefix="bench-side-")) / "g.model-explorer.json"
    times = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        export_graphs(trace, out)
        times.append(time.perf_counter() - t0)
    return times[1:]  # the first includes one-off imports



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app is served")
    ap.add_argument("--width", type=int, default=1366)
    ap.add_argument("--height", type=int, default=768)
    ap.add_argument("--actions", default=",".join(ACTIONS))
    ap.add_argument("--shots", type=Path, default=None, help="a folder for a screenshot after each action")
    args = ap.parse_args()
    actions = [a for a in args.actions.split(",") if a]
    load0 = os.getloadavg()
    proc, url = start_server(args.root.resolve())
    results: dict[str, list[float]] = {a: [] for a in actions}
    views: dict[str, list[bool]] = {a: [] for a in actions}
    said: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            for run in range(args.runs):
                context = browser.new_context(viewport={"width": args.width, "height": args.height}, accept_downloads=True)
                page = context.new_page()
                page.goto(url)
                pagekit.wait_graph(page, timeout_ms=180_000)
                page.wait_for_selector(".tlx-tabs", state="attached", timeout=180_000)
                for action in actions:
                    if action == "open":
                        seconds, seen = open_s(page, context)
                    elif action == "expand":
                        seconds, seen, text = expand_s(page)
                        said.append(text)
                    else:
                        seconds, seen = {"doctor": doctor_s, "estimate": estimate_s, "download": download_s}[action](page)
                    results[action].append(seconds)
                    views[action].append(seen)
                    print(f"run {run + 1} {action}: {seconds:.2f} s{'' if seen else ' (result NOT in view)'}", flush=True)
                    if args.shots is not None:
                        args.shots.mkdir(parents=True, exist_ok=True)
                        page.screenshot(path=str(args.shots / f"side-{action}-{run + 1}.png"))
                context.close()
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    reference = in_process_export_s(args.runs) if "download" in actions else []
    print(f"\nconditions: {platform.node()} {os.cpu_count()} CPUs, load before {load0[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f}; window {args.width}x{args.height}; root {args.root}; default 8B config")
    for action in actions:
        seen = sum(views[action])
        print(f"{action:>9}: {spread(results[action], unit=' s', count=True)}; result in view {seen}/{len(views[action])}")
    if reference:
        ratio = statistics.median(results["download"]) / statistics.median(reference)
        print(f"in-process export: {spread(reference, unit=' s', count=True)}; download / in-process = {ratio:.1f}x")
    if said:
        print(f"Expand all said: {said[-1]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
