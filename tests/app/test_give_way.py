"""Work nobody waits for gives way to a session that waits: the pages' messages are clocked per
session (`app.activity`), a page's later parts wait while another session's click is answered, and
the server's full garbage collections wait for a pause (`app.heap`)."""
from __future__ import annotations

import gc
import threading

import pytest
from playwright.sync_api import expect

from app import activity, heap
from tests.app.conftest import served


class _Clock:
    """A clock the test moves by hand: `activity.clock` (read by `heap` too), and `heap.call_later`'s queue."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.queue: list[tuple[float, object]] = []

    def __call__(self) -> float:
        return self.now

    def call_later(self, delay_s: float, callback) -> None:
        self.queue.append((self.now + delay_s, callback))

    def advance(self, seconds: float) -> None:
        """Move on by `seconds`, running each callback that falls due on the way, at its time."""
        end = self.now + seconds
        while True:
            due = sorted((t, i) for i, (t, _c) in enumerate(self.queue) if t <= end)
            if not due:
                break
            at, i = due[0]
            _t, callback = self.queue.pop(i)
            self.now = max(self.now, at)
            callback()
        self.now = end


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    activity.uninstall()  # a clean clock
    monkeypatch.setattr(activity, "clock", fake)
    monkeypatch.setattr(heap, "call_later", fake.call_later)
    monkeypatch.setattr(heap, "_waiting_since", [])
    yield fake
    activity.uninstall()


def test_the_clock_tells_one_session_from_the_others(clock):
    activity.note("a")
    assert activity.others_waiting("b") and activity.anyone_waiting()
    assert not activity.others_waiting("a")  # a session never waits on itself
    clock.advance(activity.RECENT_S - 0.01)
    assert activity.anyone_waiting()
    clock.advance(0.02)
    assert not activity.anyone_waiting()
    with activity.handling("a"):  # a message being handled: waiting however long it takes
        clock.advance(600)
        assert activity.others_waiting("b")
    assert activity.others_waiting("b")  # and for RECENT_S after it was handled
    clock.advance(activity.RECENT_S + 0.01)
    assert not activity.others_waiting("b")


@pytest.fixture
def full_collections(clock):
    """The clock's times at which full collections ended (Python's automatic ones off meanwhile)."""
    full: list[float] = []

    def on_gc(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(clock())

    was_enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(on_gc)
    try:
        yield full
    finally:
        gc.callbacks.remove(on_gc)
        if was_enabled:
            gc.enable()


def _click(clock: _Clock, seconds: float, every_s: float = 0.125) -> float:
    """A session sends a message every `every_s` for `seconds` of the clock; the time of its last one.
    (Steps that are powers of two keep the clock's sums exact.)"""
    end = clock() + seconds
    last = clock()
    while clock() < end:
        activity.note("busy")
        last = clock()
        clock.advance(every_s)
    return last


def test_a_full_collection_waits_until_the_sessions_pause(clock, full_collections):
    activity.note("busy")
    heap.request_full_collection()
    heap.request_full_collection()  # asked again while one waits: still one
    last = _click(clock, 5.0)  # a session keeps clicking for five seconds
    assert full_collections == []  # not while the session clicked
    clock.advance(heap.QUIET_S * 3)
    assert len(full_collections) == 1, full_collections  # asked twice, collected once
    # once it had paused for QUIET_S (looked at every QUIET_S / 4)
    assert last + heap.QUIET_S <= full_collections[0] <= last + heap.QUIET_S * 1.25
    assert clock.queue == []  # nothing left scheduled


def test_a_collection_waits_at_most_the_bound(clock, full_collections):
    activity.note("busy")
    asked = clock()
    heap.request_full_collection()
    _click(clock, heap.MAX_DEFER_S * 2)  # clicking without a pause
    assert len(full_collections) == 1, full_collections
    assert asked + heap.MAX_DEFER_S <= full_collections[0] <= asked + heap.MAX_DEFER_S + heap.QUIET_S  # the bound ran out


def test_with_nobody_waiting_a_collection_runs_at_once(clock, full_collections):
    heap.request_full_collection()
    assert full_collections == [clock()] and clock.queue == []


@pytest.mark.browser
def test_a_pages_later_parts_wait_while_another_session_waits(browser, tiny_loaded, monkeypatch):
    from app.views import steps

    monkeypatch.setattr(steps, "MAX_GIVE_WAY_S", 3600.0)  # gives way for as long as the other session waits
    gave_way = threading.Semaphore(0)
    original = steps.others_waiting

    def counted(session, *args):  # each time a later part was due and looked whether to give way
        waiting = original(session, *args)
        if waiting:
            gave_way.release()
        return waiting

    monkeypatch.setattr(steps, "others_waiting", counted)
    with served(tiny_loaded) as url:
        page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
        with activity.handling("another-session"):  # another page's message is being handled meanwhile
            page.goto(url)
            expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)  # the page's first part
            for _ in range(3):  # the page's later parts fell due and gave way, three times over
                assert gave_way.acquire(timeout=60)
            attached_while_waiting = page.locator(".tlx-tabs").count()
        expect(page.locator(".tlx-tabs")).to_be_attached(timeout=30_000)  # built once the other was answered
        assert attached_while_waiting == 0
        assert any(sid not in ("another-session", "") for sid in activity._last)  # the page's own messages clocked
        page.context.close()
