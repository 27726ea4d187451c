"""A forward with thousands of ops in one module's own code (a Python loop of small ops) in the
explorer: its ops are shown in spans of consecutive ops (no group draws more than `SPAN_LIMIT`
boxes), a click opens a span, search and links open the spans around an op, a module inside a span
is reachable from the tree, and nothing crosses a box."""
from __future__ import annotations

import pytest

from app.state import ExplorerState
from app.urlstate import apply_query, view_query
from app.views.graph import GraphView
from exporters.layout.checks import edge_crossings, label_overflows
from exporters.layout.groups import SPAN_CLASS, SPAN_LIMIT


@pytest.fixture(scope="module")
def long_loaded():
    from app.factory import open_factory

    return open_factory("tests.models:long_loop", (2, 4))


def _clean(s) -> None:
    assert not edge_crossings(s.layout), "an edge crosses a box"
    assert not label_overflows(s.layout)


def test_the_default_view_draws_spans_not_thousands_of_ops(long_loaded):
    s = ExplorerState(long_loaded)
    tree = s.engine.tree
    assert len(long_loaded.trace.ops) > 2_000
    assert tree.spans, "a group with more direct items than the limit is split into spans"
    for key, g in tree.groups.items():
        assert len(g.ops) + len(g.children) <= SPAN_LIMIT or key == ("", -1), key
    spans = [n for n in s.layout.nodes if n.module in tree.spans]
    assert 2 <= len(spans) <= SPAN_LIMIT and len(s.layout.nodes) <= SPAN_LIMIT + 4
    assert spans[0].label.startswith("ops ") and "(" in spans[0].label  # `ops 1-46 (46)`
    covered = sum(len(tree.groups[(n.module, 0)].all_ops) for n in spans)
    assert covered == len(tree.groups[("", 0)].all_ops)  # every op of the root sits in exactly one span
    _clean(s)


def test_a_click_opens_a_span_and_a_second_click_closes_it(long_loaded):
    s = ExplorerState(long_loaded)
    graph = GraphView(state=s)
    span = next(n for n in s.layout.nodes if n.module in s.engine.tree.spans)
    graph.click(span.x, span.y)
    assert span.module in s.expanded
    inside = [n for n in s.layout.nodes if n.kind == "op" and s.engine.tree.path_of[n.op_label][-1][0] == span.module]
    assert 1 <= len(inside) <= SPAN_LIMIT
    _clean(s)
    frame = next(f for f in s.layout.frames if f.address == span.module)
    graph.click(frame.x0 + 4, frame.y0 + 4)
    assert span.module not in s.expanded


def test_search_opens_the_spans_around_an_op_and_a_link_keeps_them(long_loaded):
    s = ExplorerState(long_loaded)
    label = long_loaded.trace.ops[len(long_loaded.trace.ops) // 2].label
    s.select_op(label)
    assert s.layout.node_of_op(label).kind == "op"  # drawn as itself, not inside a closed span
    assert s.engine.tree.spans_around(label) <= s.expanded
    _clean(s)
    again = ExplorerState(long_loaded)
    assert apply_query(again, view_query(s)) == []  # span addresses are known entries of a link
    assert again.expanded == s.expanded and again.layout.node_of_op(label).kind == "op"


def test_a_module_inside_a_span_opens_from_the_tree(long_loaded):
    s = ExplorerState(long_loaded)
    s.focus_module("head")  # the Linear after the loop sits in the last span
    assert any(n.module == "head" for n in s.layout.nodes) or any(f.address == "head" for f in s.layout.frames)
    _clean(s)


def test_a_short_forward_has_no_spans(long_loaded):
    from app.factory import open_factory

    small = open_factory("tests.models:looped_mlp", (2, 16))
    s = ExplorerState(small)
    assert not s.engine.tree.spans
    assert all(g.class_name != SPAN_CLASS for g in s.engine.tree.groups.values())
