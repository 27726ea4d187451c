"""[issue 16] A sharded model in the explorer, in Chromium: the rank selector, collective nodes, placement
badges and the communication overlay.

(1) A tensor-parallel MLP captured on a real 2-process gloo mesh and gathered onto rank 0
(`tests/distributed/workers.py::gathered_tp`): the page opens on all ranks with both ranks'
all-reduce drawn as collective nodes (their own fill and heavy border, a legend entry), each joined to
the other rank's input; the selector switches to rank 1 (only rank 1's ops drawn); the inspector shows
a column-wise Linear's `Shard(1)` badge with its global and local shapes, the hover column carries the
placement, and "Colour by" offers the wire bytes per collective. (2) A tiny Llama config (8 heads)
simulated at `--tp 8` (the CLI's own loading route): the selector names the 8 simulated ranks, a
collective found by search is drawn as one with its estimated bytes, and a sharded op shows its badge.
"""
from __future__ import annotations

import argparse
import json

import pytest
from playwright.sync_api import expect

from tests.app import pagekit
from tests.app.conftest import served

pytestmark = pytest.mark.browser

COLUMNS_JS = """(cols) => { const doc = Bokeh.documents[Bokeh.documents.length - 1];
  const s = doc.get_model_by_name('tlx-nodes'); if (!s) return null;
  return Array.from(s.data.id, (id, i) => Object.fromEntries([['id', id], ...cols.map(c => [c, s.data[c] ? s.data[c][i] : null])])); }"""
COLS = ["fill", "line_c", "line_w", "placement", "shape"]


def _rows(page):
    return {r["id"]: r for r in page.evaluate(COLUMNS_JS, COLS) or []}


@pytest.fixture(scope="module")
def gathered_url(tmp_path_factory):
    from app.sources import open_trace_file
    from tests.distributed.ranks import run_ranks

    out = tmp_path_factory.mktemp("gathered")
    run_ranks("gathered_tp", out)
    with served(open_trace_file(out / "gathered")) as url:
        yield url


@pytest.fixture(scope="module")
def simulated_url(tmp_path_factory):
    from app.cli import _load

    config = tmp_path_factory.mktemp("tp8") / "tiny-llama-8-heads.json"
    config.write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 16,
        "vocab_size": 128, "max_position_embeddings": 64, "torch_dtype": "float32"}))
    loaded = _load(str(config), None, "1,8", argparse.Namespace(tp=8, fsdp=None, world_size=None))
    with served(loaded) as url:
        yield url


def _open(page, url):
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)


def _search(page, text):
    box = page.locator(".tlx-search input").last
    box.fill(text)
    box.press("Enter")


def test_gathered_ranks_selector_collectives_badges_and_comm_overlay(gathered_url, page, artifacts_dir):
    from app.views.ranks import COLLECTIVE_FILL, COLLECTIVE_LINE

    _open(page, gathered_url)
    select = page.locator(".tlx-rank select")
    expect(select).to_be_visible()
    assert select.locator("option").all_inner_texts() == ["all 2 ranks", "folded: x 2 ranks", "rank 0", "rank 1"]
    expect(page.locator(".tlx-mesh")).to_contain_text("gloo backend · world 2 · mesh tp [2] · 2 collectives")
    expect(page.locator(".tlx-legend-collective")).to_contain_text("collective (between ranks)")
    pagekit.wait_node(page, "r1.collective_1")
    rows = _rows(page)
    for rank in (0, 1):  # both ranks' all-reduce, drawn as collectives, with the bytes in the hover
        coll = rows[f"r{rank}.collective_1"]
        assert (coll["fill"], coll["line_c"], coll["line_w"]) == (COLLECTIVE_FILL, COLLECTIVE_LINE, 3)
        assert "all_reduce over ranks [0, 1], 256B sent" in coll["placement"]
    assert rows["r0.linear_2"]["fill"] != COLLECTIVE_FILL and rows["r0.linear_2"]["line_w"] == 1
    assert "Partial(sum)" in rows["r0.linear_2"]["shape"]  # the hover's shape carries the placement
    pagekit.shot(page, artifacts_dir, "ranks-gathered-all")

    select.select_option(label="rank 1")
    page.wait_for_function("() => { const s = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes');"
                           " return s && Array.from(s.data.id).every(id => !id.startsWith('r0.')); }", timeout=15_000)
    rows = _rows(page)
    assert "r1.collective_1" in rows and rows["r1.collective_1"]["fill"] == COLLECTIVE_FILL
    _search(page, "r1.linear_1")
    inspector = page.locator(".tlx-inspector")
    expect(inspector).to_contain_text("Op r1.linear_1", timeout=15_000)
    expect(page.locator(".tlx-placement-badge")).to_have_text("Shard(1)")
    expect(inspector).to_contain_text("(4, 32)")  # global shape beside the local (4, 16)
    expect(inspector).to_contain_text("tp [2] ranks 0-1")

    colour = page.locator(".tlx-overlay select").last
    colour.select_option(label="communication (wire bytes per collective)")
    expect(page.locator(".tlx-overlay-legend").last).to_contain_text("communication (wire bytes per collective)")
    page.wait_for_timeout(300)
    pagekit.shot(page, artifacts_dir, "ranks-gathered-rank1")


def test_simulated_tp8_rank_view_collective_and_badge(simulated_url, page, artifacts_dir):
    from app.views.ranks import COLLECTIVE_FILL

    _open(page, simulated_url)
    select = page.locator(".tlx-rank select")
    assert select.locator("option").all_inner_texts() == ["x 8 ranks (simulated, rank 0 captured)"]
    expect(page.locator(".tlx-mesh")).to_contain_text("fake backend (simulated) · world 8")
    expect(page.locator(".tlx-mesh")).to_contain_text("(estimates)")
    _search(page, "collective_1")
    pagekit.wait_node(page, "collective_1")
    coll = _rows(page)["collective_1"]
    assert coll["fill"] == COLLECTIVE_FILL and "(estimate)" in coll["placement"]
    inspector = page.locator(".tlx-inspector")
    expect(inspector).to_contain_text("all_reduce (funcol)", timeout=15_000)
    expect(inspector).to_contain_text("[0, 1, 2, 3, 4, 5, 6, 7]")
    _search(page, "linear_1")
    expect(inspector).to_contain_text("Op linear_1", timeout=15_000)
    expect(page.locator(".tlx-placement-badge")).to_contain_text("Shard(")
    page.wait_for_timeout(300)
    pagekit.shot(page, artifacts_dir, "ranks-simulated-tp8")
