"""A looped module (one block called three times in forward) in the explorer without a browser: one
"x3 calls" box, a click lists the calls, a click on one call opens that call alone, its frame's
header closes it, search opens only the call an op ran in, and a link keeps the open call."""
from __future__ import annotations

import pytest

from app.state import ExplorerState
from app.urlstate import apply_query, view_query
from app.views.graph import GraphView


@pytest.fixture(scope="module")
def looped_loaded():
    from app.factory import open_factory

    return open_factory("tests.models:looped_mlp", (2, 16))


def _block_frames(s):
    return sorted(f.call for f in s.layout.frames if f.address == "block")


def test_clicks_list_the_calls_then_open_one_call_only(looped_loaded):
    s = ExplorerState(looped_loaded)
    graph = GraphView(state=s)
    box = s.layout.node("fold:block")
    assert box.label == "block: Sequential x3 calls" and box.repeat == 3
    assert graph.click(box.x, box.y) == "unfolded block"
    calls = [n.id for n in s.layout.nodes if n.module == "block"]
    assert calls == ["mod:block", "mod:block:1", "mod:block:2"] and not _block_frames(s)
    second = s.layout.node("mod:block:1")
    graph.click(second.x, second.y)
    assert _block_frames(s) == [1]  # only the clicked call opened
    assert {"mod:block", "mod:block:2"} <= {n.id for n in s.layout.nodes}
    frame = next(f for f in s.layout.frames if f.address == "block")
    assert graph.click(frame.x0 + 4, frame.y0 + 4) == "collapsed block"
    assert not _block_frames(s) and "mod:block:1" in {n.id for n in s.layout.nodes}


def test_fold_repeated_blocks_keeps_the_loop_in_one_box(looped_loaded):
    s = ExplorerState(looped_loaded, fold_repeats=True)
    assert [n.id for n in s.layout.nodes if n.module == "block"] == ["fold:block"]


def test_search_opens_only_the_call_the_op_ran_in_and_a_link_keeps_it(looped_loaded):
    s = ExplorerState(looped_loaded)
    op = next(o for o in s.trace.ops if o.module_stack and o.module_stack[-1] == ("block.0", 2))
    s.go(op.label)
    assert s.selected == op.label and _block_frames(s) == [2]
    assert s.layout.node_of_op(op.label).op_label == op.label
    q = view_query(s)
    fresh = ExplorerState(looped_loaded)
    assert apply_query(fresh, q) == []
    assert fresh.expanded == s.expanded and _block_frames(fresh) == [2]


def test_a_page_outside_a_server_draws_at_once_whatever_bokeh_holds_as_the_current_document(looped_loaded):
    # A stopped server can leave its session's document in Bokeh's process-wide patched `curdoc()` list,
    # which `pn.state.curdoc` falls back to; a view drew its changes on that dead session's next tick (never):
    # the unfold below drew nothing (CI, stop 42). A view now changes the page of the session its state is
    # bound to (`ExplorerState.document`, None here), so the click draws at once.
    import weakref

    import panel as pn
    from bokeh.io import doc as bokeh_doc

    from tests.app.conftest import served_document

    foreign = served_document()
    bokeh_doc._PATCHED_CURDOCS.append(weakref.ref(foreign))
    try:
        assert pn.state.curdoc is foreign  # what the views read before
        test_clicks_list_the_calls_then_open_one_call_only(looped_loaded)
    finally:
        bokeh_doc._PATCHED_CURDOCS.remove(next(r for r in bokeh_doc._PATCHED_CURDOCS if r() is foreign))
