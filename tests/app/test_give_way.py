"""Work nobody waits for gives way to a session that waits: the pages' messages are clocked per
session (`app.activity`), a page's later parts wait while another session's click is answered, and
the server's full garbage collections wait for a pause (`app.heap`)."""
from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest
from playwright.sync_api import expect

from app import activity, heap
from tests.app.conftest import served


def _run_on_own_loop(coro_fn):
    """Run `coro_fn()` on an asyncio loop of its own thread (a browser test may hold this thread's); its result."""
    out = []
    runner = threading.Thread(target=lambda: out.append(asyncio.run(coro_fn())))
    runner.start()
    runner.join(60)
    return out[0]


def test_the_clock_tells_one_session_from_the_others():
    activity.uninstall()  # a clean clock
    activity.note("a")
    assert activity.others_waiting("b") and activity.anyone_waiting()
    assert not activity.others_waiting("a")  # a session never waits on itself
    time.sleep(0.05)
    assert not activity.anyone_waiting(recent_s=0.01)


def _full_collections_during(coro_fn) -> tuple[list[float], float]:
    """Run `coro_fn()` on its own loop with Python's automatic collections off (only the ones asked for
    run); the times full collections ended, and its result."""
    full: list[float] = []

    def on_gc(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(time.monotonic())

    activity.uninstall()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(on_gc)
    try:
        result = _run_on_own_loop(coro_fn)
    finally:
        gc.callbacks.remove(on_gc)
        if was_enabled:
            gc.enable()
    return full, result


def test_a_full_collection_waits_until_the_sessions_pause(monkeypatch):
    monkeypatch.setattr(heap, "QUIET_S", 0.3)

    async def main() -> float:
        asked = time.monotonic()
        activity.note("busy")
        heap.request_full_collection()
        while time.monotonic() - asked < 1.0:  # a session keeps clicking for a second
            activity.note("busy")
            await asyncio.sleep(0.05)
        paused = time.monotonic()
        await asyncio.sleep(3.0)
        return paused

    full, paused = _full_collections_during(main)
    assert len(full) == 1, full  # asked once, collected once
    assert full[0] >= paused + 0.25  # not while the session clicked, but once it had paused for QUIET_S


def test_a_collection_waits_at_most_the_bound(monkeypatch):
    monkeypatch.setattr(heap, "QUIET_S", 0.3)
    monkeypatch.setattr(heap, "MAX_DEFER_S", 0.4)

    async def main() -> float:
        asked = time.monotonic()
        heap.request_full_collection()
        while time.monotonic() - asked < 2.0:  # clicking without a pause
            activity.note("busy")
            await asyncio.sleep(0.05)
        return time.monotonic()

    full, stopped = _full_collections_during(main)
    assert full and full[0] < stopped  # the bound ran out while the session still clicked


@pytest.mark.browser
def test_a_pages_later_parts_wait_while_another_session_waits(browser, tiny_loaded):
    with served(tiny_loaded) as url:
        page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
        clicking = threading.Event()

        def other_session() -> None:  # another page asking the server, as its messages would mark it
            while not clicking.is_set():
                activity.note("another-session")
                time.sleep(0.05)

        marker = threading.Thread(target=other_session)
        marker.start()
        try:
            page.goto(url)
            expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)  # the page's first part
            time.sleep(1.0)
            attached_while_waiting = page.locator(".tlx-tabs").count()
        finally:
            clicking.set()
            marker.join()
        expect(page.locator(".tlx-tabs")).to_be_attached(timeout=30_000)  # built once the other paused
        assert attached_while_waiting == 0
        assert any(sid not in ("another-session", "") for sid in activity._last)  # the page's own messages clocked
        page.context.close()
