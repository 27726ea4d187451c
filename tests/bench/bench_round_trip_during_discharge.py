"""Figures, not a test: session B's round trips in Chromium, idle and while session A discharges GPT-2 (its
heaviest action), written to test-artifacts/responsiveness.json and printed. No figure is asserted (a busy
host moves them all); moved here from tests/app/test_browser_hardening.py.

    .venv/bin/python -m pytest tests/bench/bench_round_trip_during_discharge.py -s -p no:cacheprovider
"""
from __future__ import annotations

import json
import statistics
import time

import pytest
from playwright.sync_api import expect

from tests.app import pagekit
from tests.app.conftest import browser_context_args, gpt2_loaded, gpt2_url  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser


def round_trip_ms(page, query: str) -> float:
    """Milliseconds from Enter in the search box to the inspector showing the op (selects, opens, relayouts)."""
    box = page.locator(".tlx-search input")
    box.fill(query)
    started = time.perf_counter()
    box.press("Enter")
    expect(page.locator(".tlx-inspector")).to_contain_text(f"Op {query}", timeout=60_000)
    return (time.perf_counter() - started) * 1000


DEEP_TEXT = """sel => { const walk = root => { const hit = root.querySelector(sel); if (hit) return hit;
  for (const el of root.querySelectorAll('*')) { if (el.shadowRoot) { const h = walk(el.shadowRoot); if (h) return h; } }
  return null; };
  const el = walk(document); if (!el) return null;
  const text = n => n.shadowRoot ? [...n.shadowRoot.childNodes].map(text).join('') :
    (n.nodeType === 3 ? n.textContent : [...(n.childNodes || [])].map(text).join(''));
  return text(el); }"""


def ack_ms(page, length: int = 8) -> float:
    """Milliseconds from a click on Estimate memory to the server's first answer on the page (a light round trip).

    Each call estimates another sequence length, so the answer differs from the last one even when a
    busy server sends the progress and the result in one update.
    """
    status = page.locator(".tlx-discharge-status")
    page.locator(".tlx-twin-shape input").fill(f"1,{length}")
    page.locator(".tlx-twin-shape input").press("Tab")
    before = page.evaluate(DEEP_TEXT, ".tlx-discharge-status")
    started = time.perf_counter()
    page.locator(".tlx-estimate button").click()
    page.wait_for_function(f"b => ({DEEP_TEXT})('.tlx-discharge-status') !== b", arg=before, timeout=60_000, polling=10)
    took = (time.perf_counter() - started) * 1000
    expect(status).to_contain_text("Estimate:", timeout=120_000)
    return took


def test_measure_another_sessions_round_trip_while_one_discharges(gpt2_url, gpt2_loaded, page, artifacts_dir):
    """Figures only: session B's round trips, idle and while session A discharges GPT-2 (its heaviest action)."""
    labels = [op.label for op in gpt2_loaded.trace.ops][::5]
    busy = page.context.new_page()
    for p in (page, busy):
        p.goto(gpt2_url)
        expect(p.locator(".tlx-banner")).to_be_visible(timeout=30_000)
        pagekit.wait_graph(p)
    page.bring_to_front()  # the measuring page is the visible one (a hidden page's timers are throttled)
    idle = {"select_op": [round_trip_ms(page, label) for label in labels[:8]],
            "estimate_ack": [ack_ms(page, 8 + k) for k in range(5)]}
    busy.locator(".tlx-discharge button").click()
    during: dict[str, list[float]] = {"select_op": [], "estimate_ack": []}
    deadline = time.monotonic() + 240
    i = 8
    while pagekit.banner_state(busy) == "HYPOTHESIS" and time.monotonic() < deadline and i < len(labels):
        during["select_op"].append(round_trip_ms(page, labels[i]))
        during["estimate_ack"].append(ack_ms(page, 8 + i % 50))
        i += 1
    expect(busy.locator(".tlx-banner[data-state='CORROBORATED']")).to_be_visible(timeout=240_000)
    summary = {f"{when}_{kind}": {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "n": len(v)}
               for when, d in (("idle", idle), ("during", during)) for kind, v in d.items() if v}
    figures = {"idle": idle, "during_discharge": during, "summary": summary}
    (artifacts_dir / "responsiveness.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(summary))
    if not during["select_op"]:
        print("the discharge finished before any round trip was measured: nothing to compare")
