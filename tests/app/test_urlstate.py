"""The view kept in the URL: a query written from one session reopens the same view in another,
and a link naming what the trace does not have is ignored with a readable note."""
from __future__ import annotations

import pytest

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


def test_a_link_too_large_to_be_a_view_is_ignored_whole_and_said(tiny_loaded):
    from app.urlstate import MAX_ENTRIES, MAX_QUERY_CHARS

    s = ExplorerState(tiny_loaded)
    before, layout = s.expanded, s.layout
    # the probe's shape: ~59 KB of module ids this trace lacks, one known module among them
    unknown = ",".join(f"model.ghost_{i:05d}.block" for i in range(2_400)) + ",model.layers.0"
    assert len(unknown) > MAX_QUERY_CHARS
    ignored = apply_query(s, {"open": unknown, "sel": "no_such_op_9"})
    assert len(ignored) == 1 and "characters" in ignored[0]
    assert s.expanded == before and s.selected == "" and s.layout is layout  # the default view, not re-laid out
    assert "ignored" in s.message and f"{MAX_QUERY_CHARS:,}" in s.message
    many = ",".join(["model.layers.0"] * (MAX_ENTRIES + 1))  # short, known, but more entries than a view has
    fresh = ExplorerState(tiny_loaded)
    assert len(apply_query(fresh, {"closed": many})) == 1 and fresh.expanded == before
    redirected = ExplorerState(tiny_loaded)  # where the server sends a link past the bound (app.http_guard)
    assert apply_query(redirected, {"ignored": "59000"}) == ["view (59000 characters)"]
    assert "59,000 characters" in redirected.message and redirected.expanded == before


def test_many_unknown_entries_under_the_bound_are_counted_in_a_short_note(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    ids = [f"model.ghost_{i}" for i in range(200)]
    ignored = apply_query(s, {"open": ",".join(ids)})
    assert ignored == [f"open={a}" for a in ids]
    assert "200 entries" in s.message and len(s.message) < 400  # the note says how many, not all of them


@pytest.mark.browser
def test_a_59_kb_link_of_unknown_ids_opens_the_default_view_with_a_note(default_url, page):
    """The probe's link: ~59 KB of module ids the trace lacks. The page renders and says it ignored them."""
    from playwright.sync_api import expect

    from tests.app import pagekit

    ghosts = ",".join(f"model.ghost_{i:05d}.block" for i in range(2_400))
    assert len(ghosts) > 55_000
    page.goto(f"{default_url}?open={ghosts}&sel=no_such_op")
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)
    expect(page.locator(".tlx-view-summary")).to_contain_text("view was ignored", timeout=30_000)
    assert pagekit.nodes(page)  # the default view is drawn


def test_the_server_sends_a_too_long_link_to_the_page_without_its_view(default_url):
    """Bokeh copies the page's query into the websocket URL, whose upgrade fails past a size: the server
    answers such a GET with a redirect to the bare page and a note of the dropped size."""
    import http.client
    from urllib.parse import urlsplit

    from app.urlstate import MAX_QUERY_CHARS

    where = urlsplit(default_url)
    query = "open=" + "x" * MAX_QUERY_CHARS
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    conn.request("GET", f"/?{query}", headers={"Host": where.netloc})
    answer = conn.getresponse()
    assert answer.status == 303 and answer.getheader("Location") == f"/?ignored={len(query)}"
    conn.close()
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    conn.request("GET", "/?open=" + "x" * (MAX_QUERY_CHARS - 5), headers={"Host": where.netloc})
    assert conn.getresponse().status == 200  # under the bound the page is served as asked
    conn.close()
