"""The server's loop stays answerable: the heap is frozen after loading (a full collection then walks
only what sessions made), and the loop timer names a slow callback with what it was running."""
from __future__ import annotations

import asyncio
import gc
import json
import threading
import time

from app import heap, looptiming


def test_freeze_long_lived_exempts_what_is_alive_from_collections():
    kept = [[i] for i in range(50_000)]  # long-lived objects, alive when the server would freeze
    try:
        frozen = heap.freeze_long_lived()
        assert frozen >= len(kept)
        assert len(gc.get_objects()) < frozen  # a full collection no longer walks them
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


class _Clock:
    """The loop timer's clock, moved by the callbacks themselves (each says how long it took)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run_in_a_named_function(clock: _Clock, seconds: float, wait_sampled: bool) -> None:
    """Take `seconds` of the timer's clock; with `wait_sampled`, stay until the sampler has recorded a
    sample of this frame (the order of events, not a time window: the wait is only a hang guard)."""
    clock.now += seconds
    if wait_sampled:
        me, deadline = threading.get_ident(), time.monotonic() + 60
        while not looptiming._state["samples"].get(me):
            assert time.monotonic() < deadline, "the sampler never recorded the loop thread"
            time.sleep(0.001)


def test_loop_timer_names_a_slow_callback_and_its_frames(tmp_path, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(looptiming, "clock", clock)
    log = tmp_path / "loop.jsonl"
    looptiming.install(threshold_s=0.05, path=str(log))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.call_soon(_run_in_a_named_function, clock, 0.3, True)
        loop.call_soon(_run_in_a_named_function, clock, 0.001, False)  # fast: not logged
        await asyncio.sleep(0)

    runner = threading.Thread(target=lambda: asyncio.run(main()))  # its own loop (a browser test may hold this thread's)
    try:
        runner.start()
        runner.join(120)
    finally:
        looptiming.uninstall()
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    slow = [e for e in entries if e["kind"] == "callback"]
    assert len(slow) == 1, entries
    assert slow[0]["callback"] == "_run_in_a_named_function" and slow[0]["took_s"] == 0.3
    assert slow[0]["stacks"] and all(isinstance(n, int) for _s, n in slow[0]["stacks"])
    assert any("_run_in_a_named_function" in where for where, _n in slow[0]["stacks"])


def test_loop_timer_records_a_slow_full_collection(tmp_path):
    log = tmp_path / "loop.jsonl"
    looptiming.install(threshold_s=0.0, path=str(log))
    try:
        gc.collect()
    finally:
        looptiming.uninstall()
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(e["kind"] == "gc" and e["thread"] == "MainThread" for e in entries), entries


def test_fill_in_steps_outside_a_served_session_appends_everything_at_once():
    import panel as pn

    from app.views.steps import fill_in_steps

    from app.views.steps import Built

    column = pn.Column()
    items = [pn.widgets.TextInput(name=str(i)) for i in range(5)]
    fill_in_steps(column, [*items[:4], Built(lambda: items[4])])
    assert column.objects == items
    tabs = pn.Tabs()
    fill_in_steps(tabs, [Built(lambda: ("A", pn.pane.HTML("a"))), ("B", pn.pane.HTML("b"))])
    assert tabs._names == ["A", "B"]
