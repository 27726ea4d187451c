"""Another session's round trip while one session runs a heavy action, in Chromium against the real
console script (a separate server process, as a user runs it).

    .venv/bin/python tests/bench/bench_sessions.py [--config gpt2] [--runs 3] [--actions discharge,png,doctor,estimate,open]
    .venv/bin/python tests/bench/dense_edges.py /tmp/dense    # the dense-edge trace (452 ops, 11,626 edges)
    .venv/bin/python tests/bench/bench_sessions.py --config /tmp/dense --actions expand

`expand`: A clicks "Expand all" (refused past the bounds on a dense graph), then opens the graph as far
as it goes one module at a time: for each module at depth 2 (`stages.K`), A searches it and clicks
"Expand all" under it, waiting for its status line each time (an answer, or "Not drawn" where a view
past app/view_budget.py's bound is refused), until every module is open or refused (without that bound
the last layouts are of the whole 11,626-edge graph). A step laid out off the loop (app/offloop.py) is done
once its status line no longer says "in the background".

Session B's round trip: from Enter in the search box (an op label) to B's inspector showing that op,
read at an animation frame in B's page (`performance.now()`); the server selects the op, opens its
modules and lays the graph out again. Each run reloads B and A, starts A's action, and repeats B's
round trips over the same label sequence until A's action has finished; the idle baseline runs the
same sequence with A doing nothing. Runs are interleaved (idle, then each action, then again), so a
change in the machine's load hits every row alike. Prints medians with min-max and n, and writes JSON to
test-artifacts/sessions.json. No figure here is asserted anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.app import pagekit  # noqa: E402
from tests.conftest import CHROMIUM_ARGS  # noqa: E402

DEEP_TEXT = """sel => { const walk = root => { const hit = root.querySelector(sel); if (hit) return hit;
  for (const el of root.querySelectorAll('*')) { if (el.shadowRoot) { const h = walk(el.shadowRoot); if (h) return h; } }
  return null; };
  const el = walk(document); if (!el) return '';
  const text = n => n.shadowRoot ? [...n.shadowRoot.childNodes].map(text).join('') :
    (n.nodeType === 3 ? n.textContent : [...(n.childNodes || [])].map(text).join(''));
  return text(el); }"""

SHOWS_OP = f"""([want]) => ({DEEP_TEXT})('.tlx-inspector').includes(want) ? performance.now() : false"""
READY = """() => !!(window.Bokeh && Bokeh.documents.length &&
  Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes'))"""


LOOP_LOG = ROOT / "test-artifacts" / "sessions-loop.jsonl"
# the server's loop timed (app.looptiming) when the served code has it
SERVE = ("import sys, importlib.util\n"
         "if importlib.util.find_spec('app.looptiming'):\n"
         "    import app.looptiming; app.looptiming.install()\n"
         "from app.cli import main; sys.exit(main())")


def start_server(config: str, root: Path = ROOT, loop_log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`torchlens-explore CONFIG --no-browser` of the code in `root`, in its own process; returns it and its URL.

    With `loop_log`, every loop callback over 50 ms is written there (app.looptiming), for attributing slow trips."""
    env = {**os.environ, "PYTHONPATH": str(root), "TLX_LOOP_LOG": str(loop_log or "")}
    # the server's output goes to a file: a pipe nobody reads after the URL would block the server once full
    # (a few hundred bytes per attempt were seen, so a precaution, not a diagnosed cause)
    out = (loop_log or LOOP_LOG).with_suffix(".out")
    out.parent.mkdir(exist_ok=True)
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-c", SERVE, config, "--no-browser"], cwd=str(root), env=env,
                                stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"serving on (http://\S+)", out.read_text(errors="replace"))
        if found:
            return proc, found.group(1)
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the server did not start; its output ends: {out.read_text(errors='replace')[-2000:]}")


def open_page(page, url: str, *, settle: bool = False) -> None:
    """Load `url` until the graph is interactive; `settle`: also until the parts built after the first paint
    (overview, side tabs, the open tab's form) are in the page."""
    page.goto(url)
    page.wait_for_function(READY, timeout=120_000)
    pagekit.wait_graph(page)
    if settle:
        page.wait_for_selector(".tlx-tabs", state="attached", timeout=120_000)


def round_trip_ms(page, label: str) -> tuple[float, float, float]:
    """Milliseconds (in the page) from Enter with `label` in the search box to the inspector showing it,
    with the wall-clock times (seconds) around it as seen from here."""
    box = page.locator(".tlx-search input")
    box.fill(label)
    wall0 = time.time()
    t0 = page.evaluate("() => performance.now()")
    box.press("Enter")
    t1 = page.wait_for_function(SHOWS_OP, arg=[f"Op {label}"], timeout=120_000, polling="raf").json_value()
    return t1 - t0, wall0, time.time()


def click(page, css: str) -> None:
    page.locator(f".{css} button, .{css} a").first.click()


def start_action(page, action: str) -> callable:
    """Start `action` in session A; returns a function that says whether it has finished."""
    if action == "discharge":
        click(page, "tlx-discharge")
        return lambda: pagekit.banner_state(page) != "HYPOTHESIS"
    if action == "png":
        page.locator(".bk-tab", has_text="Export").click()
        got = []
        page.on("download", lambda d: got.append(d))
        click(page, "tlx-export-png")
        return lambda: bool(got)
    if action == "doctor":
        page.locator(".bk-tab", has_text="Doctor").click()
        click(page, "tlx-doctor-run")
        return lambda: page.locator(".tlx-doctor-row").count() > 0
    if action == "estimate":  # another config: its model is built on the meta device to count parameters
        page.locator(".tlx-twin-config-path input").fill("llama-3.1-405b")
        page.locator(".tlx-twin-config-path input").press("Tab")
        click(page, "tlx-estimate")
        return lambda: "Estimate:" in page.evaluate(DEEP_TEXT, ".tlx-discharge-status")
    if action == "expand":
        return _expand_stepper(page, EXPAND_MODULES)
    if action == "open":  # a new page of the explorer (A reloads: the server builds and sends a session's page)
        page.evaluate("() => { window.__tlx_old = true; location.reload(); }")
        return lambda: _page_ready(page)
    raise SystemExit(f"unknown action {action!r}")


STALL_S = 60.0  # A waiting this long for a step's answer is reported (with what its status line says)
EXPAND_MODULES: list[str] = []  # set by main: the modules A opens one by one (depth 2)


def _summary(page) -> str:
    try:
        return page.evaluate(DEEP_TEXT, ".tlx-view-summary")
    except Exception:  # noqa: BLE001 - a page between renders: nothing to read yet
        return ""


def _expand_stepper(page, modules: list[str]) -> callable:
    """A's "expand" as a stepper: each call checks A's status line for the last step's answer and, when it
    is there, sends the next step (so A acts as fast as its own answers come back); True once all are done."""
    expand_all = lambda: page.locator(".tlx-tool-link", has_text="Expand all").click()  # noqa: E731
    steps: list[tuple[callable, tuple[str, ...]]] = [(expand_all, ("Expand all refused", "Opened every module"))]
    for m in modules:
        steps.append((lambda m=m: (page.locator(".tlx-search input").fill(m),
                                   page.locator(".tlx-search input").press("Enter")), (f"Module {m} opened", "Not drawn")))
        steps.append((expand_all, (f"every module under {m}", "refused: ", "Not drawn")))
    pending: list[tuple[str, ...]] = []
    sent = [0.0]

    def done() -> bool:
        if pending:
            status = _summary(page)
            if not any(w in status for w in pending[0]) or "in the background" in status:  # its layout still running
                if time.perf_counter() - sent[0] > STALL_S:  # say what A shows instead of waiting in silence
                    print(f"A stalled {STALL_S:.0f} s waiting for {pending[0]}; its status line: {status!r}", flush=True)
                    sent[0] = time.perf_counter()
                return False
            pending.clear()
        if not steps:
            return True
        send, want = steps.pop(0)
        send()
        sent[0] = time.perf_counter()
        pending.append(want)
        return False

    done()
    return done


def _page_ready(page) -> bool:
    """Whether A's reloaded page is in place and finished: its graph drawn and the parts built after it
    (overview, side tabs) in the page (False while the old page or nothing is there)."""
    try:
        return bool(page.evaluate("() => !window.__tlx_old && (" + READY + ")() && !!(" + DEEP_TEXT + ")('.tlx-discharge')"))
    except Exception:  # the page is navigating: no context to evaluate in yet
        return False


def run_once(a, b, url: str, labels: list[str], action: str | None, limit: int) -> tuple[list[tuple], float, float]:
    """One run: fresh pages (B settled first, then A, whose after-paint parts overlap B's first trips), A starts
    `action` (None: idle), B's round trips until A is done (or `limit`).

    Returns B's trips as (ms, wall start, wall end), how long A's action took and its wall-clock start."""
    open_page(b, url, settle=True)  # B's own page finished loading: its trips measure the other session
    open_page(a, url)  # A's page is still building its side parts while B's trips start
    b.bring_to_front()
    trips: list[tuple[float, float, float]] = []
    started, wall = time.perf_counter(), time.time()
    done = start_action(a, action) if action else (lambda: len(trips) >= limit)
    while not done() and len(trips) < 200:
        trips.append(round_trip_ms(b, labels[len(trips) % len(labels)]))
    took = time.perf_counter() - started
    if action:
        while not done() and time.perf_counter() - started < 600:
            b.wait_for_timeout(200)
        took = time.perf_counter() - started
    return trips, took, wall


def loop_spans(path: Path) -> list[dict]:
    """The server's slow loop callbacks and late wake-ups (app.looptiming), each with its start."""
    if not path.exists():
        return []
    spans = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for s in spans:
        s["start"] = s["end"] - s["took_s"]
    return spans


def attribute(slow: list[dict], spans: list[dict]) -> list[dict]:
    """Each slow trip with the server spans that overlapped it (longest first)."""
    out = []
    for trip in slow:
        over = [s for s in spans if s["start"] < trip["wall_end"] and s["end"] > trip["wall_start"]]
        over.sort(key=lambda s: -s["took_s"])
        out.append({**trip, "spans": [{k: s[k] for k in ("kind", "took_s", "callback", "stacks", "threads", "thread") if k in s}
                                      for s in over[:4]]})
    return out


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"median_ms": round(statistics.median(values)), "min_ms": round(min(values)), "max_ms": round(max(values)),
            "p90_ms": round(sorted(values)[int(0.9 * (len(values) - 1))]),
            "over_500": sum(v > 500 for v in values), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="gpt2")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--actions", default="discharge,png,doctor,estimate,open")
    parser.add_argument("--idle-trips", type=int, default=12, help="round trips per idle run")
    parser.add_argument("--compare-root", default="", help="also serve the code of this checkout (e.g. the commit "
                        "before a change), interleaved with this one; its rows are marked 'other'")
    args = parser.parse_args()
    from app.sources import open_config, open_path

    source = open_path(args.config) if Path(args.config).exists() else open_config(args.config)
    labels = [op.label for op in source.trace.ops][3::7][:24]
    EXPAND_MODULES[:] = [m for m in source.trace.modules if m.count(".") == 1]
    load_at_start = os.getloadavg()[0]
    LOOP_LOG.parent.mkdir(exist_ok=True)
    logs = {"": LOOP_LOG, "other: ": LOOP_LOG.with_name("sessions-loop-other.jsonl")}
    for log in logs.values():
        log.unlink(missing_ok=True)
    servers = {"": start_server(args.config, loop_log=logs[""])}
    if args.compare_root:
        servers["other: "] = start_server(args.config, Path(args.compare_root), loop_log=logs["other: "])
    results: dict[str, dict] = {}
    try:
        with sync_playwright() as pw:
            exe = shutil.which("chromium") or shutil.which("chromium-browser")
            browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
            a = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
            b = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
            names = [None] + args.actions.split(",")
            rows = [(tag, n) for n in names for tag in servers]
            trips: dict[str, list[float]] = {f"{tag}{n or 'idle'}": [] for tag, n in rows}
            durations: dict[str, list[float]] = {key: [] for key in trips}
            slow: dict[str, list[dict]] = {tag: [] for tag in servers}
            for run in range(args.runs):  # interleaved: drift in the machine's load hits every row alike
                for tag, action in rows:
                    key = f"{tag}{action or 'idle'}"
                    got, took, wall = run_once(a, b, servers[tag][1], labels, action, args.idle_trips)
                    trips[key] += [ms for ms, _s, _e in got]
                    durations[key].append(took)
                    slow[tag] += [{"row": key, "run": run, "trip": i, "of": len(got), "ms": round(ms),
                                   "after_action_start_s": round(s0 - wall, 2), "action_s": round(took, 1),
                                   "wall_start": s0, "wall_end": s1} for i, (ms, s0, s1) in enumerate(got) if ms > 500]
                    print(f"{key} run {run}: {len(got)} trips, median "
                          f"{statistics.median([g[0] for g in got]) if got else float('nan'):.0f} ms, action {took:.1f} s, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
            for key in trips:
                results[key] = {"round_trip": summary(trips[key]), "action_s": [round(d, 1) for d in durations[key]],
                                "trips_ms": [round(t) for t in trips[key]]}
            browser.close()
    finally:
        for proc, _url in servers.values():
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    conditions = {"config": args.config, "runs": args.runs, "python": platform.python_version(), "cores": os.cpu_count(),
                  "load_1min_at_start": load_at_start, "load_1min_at_end": os.getloadavg()[0], "server": "console script, separate process, 127.0.0.1",
                  "compare_root": args.compare_root,
                  "browser": "Debian chromium via Playwright, two contexts (two sessions)"}
    out = ROOT / "test-artifacts" / "sessions.json"
    out.parent.mkdir(exist_ok=True)
    slow_trips = {tag or "this": attribute(slow[tag], loop_spans(logs[tag])) for tag in servers}
    out.write_text(json.dumps({"conditions": conditions, "results": results, "slow_trips": slow_trips}, indent=2))
    print(f"\n{json.dumps(conditions)}\n")
    print("| session A's action | A's action took (s) | B's round trip: median (min-max), p90, n | over 500 ms |")
    print("|---|---|---|---|")
    for name, r in results.items():
        s = r["round_trip"]
        if s["n"]:
            print(f"| {name} | {', '.join(map(str, r['action_s']))} | {s['median_ms']} ({s['min_ms']}-{s['max_ms']}), "
                  f"{s['p90_ms']}, {s['n']} | {s['over_500']} |")
    for tag, got in slow_trips.items():
        for trip in got:
            print(f"\n{tag}: {trip['row']} run {trip['run']} trip {trip['trip'] + 1} of {trip['of']}: {trip['ms']} ms, "
                  f"{trip['after_action_start_s']} s after A's start (A took {trip['action_s']} s)")
            for span in trip["spans"]:
                print(f"  {span['kind']} {span['took_s']:.3f} s {span.get('callback', '')} "
                      f"{(span.get('stacks') or [['', 0]])[0][0] or span.get('threads', '')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
