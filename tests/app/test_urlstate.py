"""The view kept in the URL: a query written from one session reopens the same view in another,
and a link naming what the trace does not have is ignored with a readable note."""
from __future__ import annotations

from app.state import ExplorerState
from app.urlstate import apply_query, view_query


def test_a_view_round_trips_through_its_query(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    assert view_query(s) == {}  # the default view needs no query
    s.toggle("model.layers.1")
    op = next(o for o in s.trace.ops if o.module == "model.layers.0.mlp.down_proj")
    s.go(op.label)
    q = view_query(s)
    assert q["sel"] == op.label and q["q"] == op.label and "model.layers.1" in q["open"].split(",")
    fresh = ExplorerState(tiny_loaded)
    assert apply_query(fresh, q) == []
    assert fresh.expanded == s.expanded and fresh.selected == op.label and fresh.query == op.label
    assert view_query(fresh) == q


def test_a_closed_default_module_and_folding_are_kept(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    s.toggle("model.layers")
    s.fold_repeats = not s.fold_repeats
    q = view_query(s)
    assert q["closed"] == "model.layers" and q["fold"] in ("0", "1")
    fresh = ExplorerState(tiny_loaded)
    apply_query(fresh, q)
    assert "model.layers" not in fresh.expanded and fresh.fold_repeats == s.fold_repeats


def test_a_link_to_what_the_trace_lacks_is_ignored_and_said(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    before = s.expanded
    ignored = apply_query(s, {"open": "model.nope,model.layers.0", "sel": "no_such_op_9"})
    assert ignored == ["open=model.nope", "sel=no_such_op_9"]
    assert s.expanded == before | {"model.layers.0"} and s.selected == ""
    assert "model.nope" in s.message and "no_such_op_9" in s.message
