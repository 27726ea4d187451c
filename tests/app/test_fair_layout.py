"""Fair sessions (issue 39): "Expand all" over a graph too wide to lay out on the server's one event
loop is refused with a readable message instead of holding every other session's round trips;
under the bounds it opens every module as before. The wide graph is a real traced model (1,200
small blocks, 3 ops and 6 edges each), built here. And any view past `app.view_budget`'s bound (a run of
single opens, a link's view) is not laid out: the session keeps the view it had and says why; the
dense-edge graph is `tests/bench/dense_edges.py` (452 ops, 11,626 edges)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from app import state as state_mod
from app.state import EXPAND_ALL_MAX_EDGES, EXPAND_ALL_MAX_OPS, ExplorerState, expand_all_size
from app.views.graph import GraphView

BLOCKS = 1_200


class _Mix(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * y + x, x - y


class _Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Mix() for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for block in self.blocks:
            x, y = block(x, y)
        return x + y


def wide_model() -> nn.Module:
    """The factory `open_factory` imports (`tests.app.test_fair_layout:wide_model`)."""
    return _Wide().eval()


@pytest.fixture(scope="module")
def wide_loaded():
    from app.factory import open_factory

    return open_factory("tests.app.test_fair_layout:wide_model", (2, 4))


def test_expand_all_over_a_wide_graph_is_refused_with_a_message(wide_loaded):
    s = ExplorerState(wide_loaded)
    ops, edges = expand_all_size(s.trace)
    assert ops == len(s.trace.ops) > EXPAND_ALL_MAX_OPS and edges > EXPAND_ALL_MAX_EDGES
    graph = GraphView(state=s)
    before, layout = s.expanded, s.layout
    graph._view_action("expand-all")  # what the breadcrumb's "Expand all" link sends
    assert s.expanded == before and s.layout is layout, "no layout was computed on the server's loop"
    assert "refused" in s.message and f"{ops:,} ops" in s.message and "one by one" in s.message
    assert f"{ops:,} ops" in graph._summary_html()  # the status line shows it


def test_expand_all_under_the_bounds_opens_every_module(wide_loaded, monkeypatch):
    s = ExplorerState(wide_loaded)
    ops, edges = expand_all_size(s.trace)
    monkeypatch.setattr(state_mod, "EXPAND_ALL_MAX_OPS", ops)  # the same graph, now exactly at the bounds
    monkeypatch.setattr(state_mod, "EXPAND_ALL_MAX_EDGES", edges)
    s.expand_all()
    assert set(s.trace.modules) <= s.expanded and s.message == "Opened every module."


def test_expand_all_under_a_focused_block_of_the_wide_graph_is_drawn(wide_loaded):
    s = ExplorerState(wide_loaded)
    s.focused = "blocks.7"
    assert expand_all_size(s.trace, "blocks.7") == (3, 6)  # mul, add and sub, two parents each
    s.expand_all()
    assert "blocks.7" in s.expanded and "refused" not in s.message


def test_the_size_counts_the_ops_in_and_under_the_module(tiny_loaded):
    trace = tiny_loaded.trace
    inside = [o for o in trace.ops if o.module == "model.layers.0" or o.module.startswith("model.layers.0.")]
    assert inside and expand_all_size(trace, "model.layers.0") == (len(inside), sum(len(o.parents) for o in inside))
    assert expand_all_size(trace, "")[0] == len(trace.ops)


# -- the bound on any view (app/view_budget.py) ------------------------------------------------
@pytest.fixture(scope="module")
def dense_loaded():
    from app.factory import open_factory

    return open_factory("tests.bench.dense_edges:dense_model", (2, 4))


def _stage(trace, k: int) -> set[str]:
    return {m for m in trace.modules if m == f"stages.{k}" or m.startswith(f"stages.{k}.")}


def test_opening_the_dense_graph_stage_by_stage_stops_at_the_bound_and_keeps_the_view(dense_loaded):
    """Stage after stage opened whole: each view under the bound is drawn; the first past it is not laid out
    (the layout object and the expansion stay those drawn before), and the status line says why, also
    after the action's own "Opened ..." line."""
    from app import view_budget

    s = ExplorerState(dense_loaded)
    drawn_stages = 0
    for k in range(15):
        before_layout, before_expanded = s.layout, s.expanded
        s.focused = f"stages.{k}"
        s.expand_all()  # "Expand all" under the focused stage: inside the Expand all bound, maybe past the view's
        ops, edges = view_budget.drawn_size(s.engine, before_expanded | _stage(s.trace, k) | {"stages"})
        if ops <= view_budget.MAX_DRAWN_OPS and edges <= view_budget.MAX_DRAWN_EDGES:
            assert s.layout is not before_layout and _stage(s.trace, k) <= s.expanded
            drawn_stages += 1
            continue
        assert s.layout is before_layout and s.expanded == before_expanded, "a view past the bound was laid out"
        assert s.message.startswith("Not drawn") and f"{edges:,} edges" in s.message, s.message
        break
    else:
        pytest.fail("the whole dense graph was drawn")
    assert 0 < drawn_stages < 15
    s.toggle("stages.0")  # closing a stage is answered as always
    assert s.message == "Closed stages.0." and "stages.0" not in s.expanded


def test_the_size_bounds_what_the_layout_draws(dense_loaded, tiny_loaded):
    """`drawn_size` counts exactly the op boxes the layout draws, and at least its edges (the views of a tiny
    Llama and the dense graph's first stages)."""
    from app import view_budget

    for loaded, views in ((tiny_loaded, [None, "model.layers.0", "model.layers.1.mlp"]),
                          (dense_loaded, [None, "stages.0", "stages.1"])):
        s = ExplorerState(loaded)
        for where in views:
            if where:
                s.show_module(where)
            ops, edges = view_budget.drawn_size(s.engine, s.expanded, s.fold_repeats)
            drawn_ops = sum(n.kind in ("op", "io") for n in s.layout.nodes if not n.members) + sum(
                len(n.members) for n in s.layout.nodes if n.kind in ("op", "io") and n.members)
            assert ops == drawn_ops, (where, ops, drawn_ops)
            assert edges >= len(s.layout.edges), (where, edges, len(s.layout.edges))


def test_a_link_past_the_bound_opens_the_default_view_and_says_so(dense_loaded):
    everything = frozenset(dense_loaded.trace.modules) | {""}
    s = ExplorerState(dense_loaded, expanded=everything)
    assert s.expanded == frozenset(s.engine.default_expansion()) and s.layout is not None
    assert s.message.startswith("Not drawn") and "the view stays as it was" in s.message, s.message


# -- layouts off the loop (app/offloop.py) -----------------------------------------------------
def _on_a_loop(main) -> None:
    """Run coroutine function `main` on an asyncio loop of its own thread (a browser test may hold this one's)."""
    import asyncio
    import threading

    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(300)
    assert not runner.is_alive(), "the loop never finished"
    if failure:
        raise failure[0]


def test_the_loop_serves_another_callback_while_a_layout_runs_off_it(dense_loaded):
    """The dense graph laid out whole, cold, on `OffLoop`'s thread: the layout waits for another loop callback
    before it starts (it could never start were it on the loop), loop callbacks run while it computes, and its
    result is applied on the loop after it finished."""
    import asyncio
    import copy
    import threading

    from app.offloop import OffLoop

    s = ExplorerState(dense_loaded)
    engine = copy.copy(s.engine)
    engine.cache, engine.placements, engine.shapes = {}, {}, {}  # cold: the whole layout is computed
    everything = frozenset(s.trace.modules) | {""}
    events: list[str] = []
    computing = threading.Event()
    seen_while_computing: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        applied = asyncio.Event()
        go = threading.Event()

        def other_session() -> None:
            events.append("another callback")
            go.set()

        def work():
            events.append("layout asked")
            loop.call_soon_threadsafe(other_session)
            assert go.wait(60), "the loop did not run while the layout waited"
            computing.set()
            try:
                return engine.layout(everything)
            finally:
                computing.clear()
                events.append("layout finished")

        def done(layout, _seconds) -> None:
            events.append("applied")
            assert len(layout.edges) == sum(len(op.parents) for op in s.trace.ops)
            applied.set()

        OffLoop().submit(work, done, over=lambda _s: events.append("over"), failed=lambda e: events.append(repr(e)),
                         deliver=loop.call_soon_threadsafe)
        while not applied.is_set():  # a callback per loop turn: counts those run while the layout computes
            await asyncio.sleep(0)
            if computing.is_set():
                seen_while_computing.append(1)

    _on_a_loop(main)
    assert events == ["layout asked", "another callback", "layout finished", "applied"], events
    assert seen_while_computing, "no loop callback ran while the layout computed"


def test_a_superseded_job_is_stopped_and_a_late_result_is_dropped():
    """A newer request stops the job in flight (its `done` never runs); a result handed over before a newer
    request came is dropped when the loop gets to it; the newest is applied."""
    import threading

    from app.offloop import OffLoop

    queued: list = []  # the loop's next ticks, run here by hand
    got: list[str] = []
    jobs = OffLoop()
    release, running = threading.Event(), threading.Event()

    def waits_forever() -> str:
        running.set()
        while not release.wait(0.01):  # bytecode between waits: a stop is raised here
            pass
        return "first"

    for_ = dict(over=lambda _s: got.append("over"), failed=lambda e: got.append(repr(e)), deliver=queued.append)
    jobs.submit(waits_forever, lambda r, _s: got.append(r), **for_)
    first = jobs._job
    assert running.wait(60)
    jobs.submit(lambda: "second", lambda r, _s: got.append(r), **for_)
    assert first.ended.wait(60) and first.reason == "superseded"
    jobs.join(60)
    assert len(queued) == 1  # the first was stopped: nothing of it was handed over
    jobs.submit(lambda: "third", lambda r, _s: got.append(r), **for_)  # newer than "second", handed over already
    jobs.join(60)
    for fn in queued:
        fn()
    assert got == ["third"] and jobs.dropped == 1 and not jobs.pending


def test_a_job_past_its_bound_is_stopped_and_says_so():
    import threading

    from app.offloop import OffLoop

    queued: list = []
    got: list[str] = []
    never = threading.Event()

    def waits_forever() -> None:
        while not never.wait(0.01):
            pass

    jobs = OffLoop(bound_s=0.0)
    jobs.submit(waits_forever, lambda r, _s: got.append("done"), over=lambda _s: got.append("over"),
                failed=lambda e: got.append(repr(e)), deliver=queued.append)
    jobs.join(60)
    for fn in queued:
        fn()
    assert got == ["over"] and jobs._job.reason == "bound"


def _background(s) -> list:
    """Have `s` hand its background layouts to a list (the loop's next ticks, run by the test)."""
    queued: list = []
    s.deliver_layouts = queued.append
    return queued


def test_a_session_lays_a_big_view_out_off_the_loop_and_the_newest_view_wins(dense_loaded, monkeypatch):
    """Two big views asked one after the other: neither is laid out inline (the view drawn stays until the
    result is applied, the status line says a layout is running); the first is superseded, the second is
    drawn; then a small view, drawn inline, supersedes a big one still in flight."""
    from app import view_budget

    monkeypatch.setattr(view_budget, "MAX_DRAWN_EDGES", 50_000)
    s = ExplorerState(dense_loaded)
    queued = _background(s)
    graph = GraphView(state=s)
    drawn = s.layout
    first = s.expanded | _stage(s.trace, 0) | _stage(s.trace, 1) | {"stages"}
    second = frozenset(s.trace.modules) | {""}
    s.expanded = first
    assert s.layout is drawn and s.layout_pending.startswith("laying out") and "in the background" in graph._summary_html()
    s.expanded = second
    s._jobs.join(120)
    for fn in queued:
        fn()
    assert s.layout.expanded == second and not s.layout_pending and s._drawn == (second, s.fold_repeats)
    queued.clear()
    s.expanded = first  # big again: in flight ...
    s.collapse_all()  # ... and a small view drawn inline at once
    s._jobs.join(120)
    for fn in queued:
        fn()
    assert s.layout.expanded == frozenset({""}) and not s.layout_pending


def test_a_layout_past_its_time_bound_keeps_the_view_and_says_so(dense_loaded, monkeypatch):
    from app import view_budget
    from app.offloop import OffLoop

    monkeypatch.setattr(view_budget, "MAX_DRAWN_EDGES", 50_000)
    s = ExplorerState(dense_loaded)
    queued = _background(s)
    s._jobs = OffLoop(bound_s=0.0)  # every background layout is past it (the whole graph, cold, takes far longer)
    drawn, before = s.layout, s.expanded
    s.expanded = frozenset(s.trace.modules) | {""}
    s._jobs.join(120)
    for fn in queued:
        fn()
    assert s.layout is drawn and s.expanded == before and not s.layout_pending
    assert s.message.startswith("Not drawn: laying out that view") and "was stopped" in s.message, s.message


def test_a_view_refused_after_unfolding_checks_the_fold_box_again(monkeypatch):
    """The 126-layer config starts folded; with the bound just under its view, unfolding is refused: the
    state goes back to folded and so does the checkbox (they disagreed, and outside a server they fed each
    other until the recursion limit)."""
    from app import view_budget
    from app.sources import open_config

    s = ExplorerState(open_config("llama-3.1-405b"))
    graph = GraphView(state=s)
    assert s.fold_repeats and graph.fold.value
    monkeypatch.setattr(view_budget, "MAX_DRAWN_EDGES", view_budget.drawn_size(s.engine, s.expanded, True)[1] - 1)
    graph.fold.value = False  # what unchecking the box in the page does
    assert s.fold_repeats and graph.fold.value, (s.fold_repeats, graph.fold.value)
    assert s.message.startswith("Not drawn")


def test_an_idle_owner_thread_ends_and_the_next_job_starts_another(monkeypatch):
    from app import offloop

    monkeypatch.setattr(offloop, "IDLE_S", 0.0)
    queued: list = []
    got: list[int] = []
    jobs = offloop.OffLoop()
    jobs.submit(lambda: 1, lambda r, _s: got.append(r), over=lambda _s: None, failed=lambda e: None, deliver=queued.append)
    first = jobs._thread
    first.join(60)
    assert not first.is_alive() and jobs._thread is None
    queued.pop()()
    jobs.submit(lambda: 2, lambda r, _s: got.append(r), over=lambda _s: None, failed=lambda e: None, deliver=queued.append)
    jobs.join(60)
    for fn in queued:
        fn()
    assert got == [1, 2]


def test_a_hand_over_that_fails_leaves_the_owner_serving_the_next_request():
    """A session whose hand-over raised (its document gone) must not leave a dead thread that every later
    request waits on: the next job runs and its outcome reaches the page."""
    from app.offloop import OffLoop

    queued: list = []
    got: list[int] = []
    gone = [True]  # the first session's document is gone: every hand-over to it raises

    def deliver(fn) -> None:
        if gone[0]:
            raise RuntimeError("the session's document is gone")
        queued.append(fn)

    jobs = OffLoop()
    for_ = dict(over=lambda _s: None, failed=lambda e: got.append(repr(e)), deliver=deliver)
    jobs.submit(lambda: 1, lambda r, _s: got.append(r), **for_)
    jobs.join(60)
    gone[0] = False
    jobs.submit(lambda: 2, lambda r, _s: got.append(r), **for_)
    jobs.join(10)
    for fn in queued:
        fn()
    assert got == [2] and not jobs.pending


def test_a_layout_that_fails_reaches_the_page_as_its_refusal():
    """A layout's error is handed to the session's next tick and shown (`failed`), after the handler that
    caught it has ended; before, the outcome raised NameError on the loop and the page kept saying the
    layout was running in the background."""
    from app.offloop import OffLoop

    queued: list = []
    got: list[str] = []

    def fails() -> None:
        raise ValueError("the layout refused")

    jobs = OffLoop()
    jobs.submit(fails, lambda r, _s: got.append(r), over=lambda _s: None, failed=lambda e: got.append(repr(e)),
                deliver=queued.append)
    jobs.join(60)
    for fn in queued:
        fn()
    assert got == ["ValueError('the layout refused')"]
