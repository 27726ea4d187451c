"""The backward in the explorer, in Chromium at 1366x768 and 1600x1000: the Forward/Backward switch draws
the backward graph in the forward's module nesting, "Colour by" offers saved-for-backward bytes and
gradient norms, a backward node found by search fills the inspector with its forward op's gradient
statistics and saved tensors, and the Memory tab shows the per-layer table and plot, then estimates a
weights-free training step with and without checkpointing.
"""
from __future__ import annotations

import pytest
import torch
from playwright.sync_api import expect

from tests.app import pagekit
from tests.app.conftest import served

pytestmark = pytest.mark.browser

SIZES = [(1366, 768), (1600, 1000)]
SOURCE_NODES_JS = """(name) => { const doc = Bokeh.documents[Bokeh.documents.length - 1];
  const s = doc.get_model_by_name(name); if (!s) return null;
  return Array.from(s.data.id, (id, i) => ({id, kind: s.data.kind[i], module: s.data.module[i], fill: s.data.fill[i]})); }"""


@pytest.fixture(scope="module")
def backward_url(tmp_path_factory):
    """A 2-layer GPT-2 (random weights) captured with its backward; its config saved for the Memory tab."""
    import tracer
    from app.sources import Loaded
    from tracer.options import CaptureOptions
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, attn_pdrop=0.0,
                     resid_pdrop=0.0, embd_pdrop=0.0, architectures=["GPT2LMHeadModel"])
    path = tmp_path_factory.mktemp("gpt2-config") / "config.json"
    cfg.to_json_file(str(path))
    model = GPT2LMHeadModel(cfg).train()
    trace = tracer.trace(model, (torch.randint(0, 128, (1, 16)),), capture=CaptureOptions(backward=True),
                         loss=lambda o: o.logits.float().logsumexp(-1).mean())
    loaded = Loaded(trace, "GPT-2 (2 layers) training step", "factory", "tests", model=model,
                    config_path=path, input_shape=(1, 16))
    with served(loaded) as url:
        yield url


def _open(page, url, size):
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)


def _source(page, name):
    return page.evaluate(SOURCE_NODES_JS, name) or []


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_backward_switch_overlays_and_inspector(backward_url, page, artifacts_dir, size):
    _open(page, backward_url, size)
    expect(page.locator(".tlx-direction-note")).to_contain_text("autograd nodes")
    forward = _source(page, "tlx-nodes")
    page.locator(".tlx-direction button", has_text="Backward").click()
    page.wait_for_function("(n) => { const d = Bokeh.documents[Bokeh.documents.length - 1];"
                           " const s = d.get_model_by_name(n); return s && s.data.id.length > 0; }",
                           arg="tlx-backward-nodes", timeout=30_000)
    backward = _source(page, "tlx-backward-nodes")
    # the same module nesting: the collapsed blocks drawn are the forward's, less the dropout (p=0 makes no
    # autograd node, so nothing of it runs in the backward)
    fwd_modules = {n["id"] for n in forward if n["kind"] == "module"}
    assert {n["id"] for n in backward if n["kind"] == "module"} == fwd_modules - {"mod:transformer.drop"}
    assert {"mod:transformer.h.0", "mod:transformer.h.1", "mod:lm_head"} <= fwd_modules
    assert "loss" in {n["id"] for n in backward}
    # Colour by: saved-for-backward bytes, then gradient norm, each recolours the backward boxes
    select = page.locator(".tlx-overlay select").last
    before = [n["fill"] for n in backward]
    select.select_option(label="saved for backward (bytes)")
    expect(page.locator(".tlx-overlay-legend").last).to_contain_text("saved for backward (bytes)")
    page.wait_for_function("([n, old]) => { const s = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name(n);"
                           " return JSON.stringify(Array.from(s.data.fill)) !== old; }",
                           arg=["tlx-backward-nodes", str(before).replace("'", '"')], timeout=15_000)
    select.select_option(label="gradient norm")
    expect(page.locator(".tlx-overlay-legend").last).to_contain_text("gradient norm")
    # a backward node found by search: its forward op in the inspector, with gradients and saved tensors
    box = page.locator(".tlx-search input").last
    box.fill("grad_addmm_8")
    box.press("Enter")
    inspector = page.locator(".tlx-inspector")
    expect(inspector).to_contain_text("Op addmm_8", timeout=15_000)
    expect(inspector).to_contain_text("AddmmBackward0")
    expect(inspector).to_contain_text("gradient norm")
    expect(inspector).to_contain_text("saved for backward")
    expect(inspector).to_contain_text("param transformer.h.1.mlp.c_proj.weight")
    expect(page.locator(".tlx-direction-note")).to_contain_text("grad_addmm_8: AddmmBackward0")
    page.wait_for_timeout(400)
    pagekit.shot(page, artifacts_dir, f"backward-view-{size[0]}x{size[1]}")
    page.locator(".tlx-direction button", has_text="Forward").click()
    expect(page.locator(".tlx-direction-note")).to_be_visible()


def test_the_memory_panel_shows_the_traces_table_and_estimates_a_step(backward_url, page):
    _open(page, backward_url, SIZES[0])
    page.locator(".bk-tab", has_text="Memory").click()
    table = page.locator(".tlx-memory-table")
    expect(table).to_contain_text("Measured (real tensors)", timeout=15_000)
    expect(table).to_contain_text("GPT2Block")
    expect(page.locator(".tlx-memory-plot canvas").first).to_be_attached(timeout=15_000)
    page.locator(".tlx-memory-shape input").fill("1,16")
    page.locator(".tlx-memory-run button").click()
    expect(page.locator(".tlx-memory-note")).to_contain_text("batch 1, sequence 16", timeout=120_000)
    expect(table).to_contain_text("Estimate (weights-free")
    expect(table).to_contain_text("ckpt")


def test_the_memory_panel_estimates_the_8b_step_at_4096_tokens(default_url, page, artifacts_dir):
    """One estimate (the 8B step's, the costly part), then the panel read at each window size."""
    _open(page, default_url, SIZES[0])
    expect(page.locator(".tlx-direction")).to_have_count(0)  # a forward-only trace has no switch
    page.locator(".bk-tab", has_text="Memory").click()
    expect(page.locator(".tlx-memory-shape input")).to_have_value("1,4096")
    page.locator(".tlx-memory-run button").click()
    expect(page.locator(".tlx-memory-note")).to_contain_text("batch 1, sequence 4096", timeout=180_000)
    table = page.locator(".tlx-memory-table")
    for size in SIZES:
        page.set_viewport_size({"width": size[0], "height": size[1]})
        expect(page.locator(".tlx-memory-note")).to_contain_text("batch 1, sequence 4096")
        expect(table).to_contain_text("0-31 LlamaDecoderLayer x32 (each)")
        expect(table).to_contain_text("GiB")
        expect(table).to_be_in_viewport()
        expect(page.locator(".tlx-memory-plot canvas").first).to_be_attached(timeout=15_000)
        page.wait_for_timeout(600)
        pagekit.shot(page, artifacts_dir, f"memory-panel-{size[0]}x{size[1]}")
