"""The explorer in Chromium: the default 8B page, expanding, inspecting, doctor, export, discharge.

Each test drives the real app served in-process on loopback, through Debian's Chromium.
Screenshots go to the artifacts folder and docs/images/ (docs/explorer.md shows them).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.app import pagekit

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]


def open_page(page, url):
    page.goto(url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)


def test_default_page_shows_hypothesis_and_the_32_decoder_layers(default_url, default_loaded, page, artifacts_dir):
    open_page(page, default_url)
    assert pagekit.banner_state(page) == "HYPOTHESIS"
    expect(page.locator(".tlx-banner-headline")).to_contain_text("HYPOTHESIS: shapes unproven, no values exist")
    drawn = pagekit.nodes(page)
    layers = sorted(n["module"] for n in drawn if n["kind"] == "module" and "LlamaDecoderLayer" in n["label"])
    assert layers == sorted(f"model.layers.{i}" for i in range(32))
    expect(page.locator(".tlx-view-summary")).to_contain_text("32 \u00d7 LlamaDecoderLayer")
    expect(page.locator(".tlx-tree")).to_contain_text("8,030,261,248")  # root parameter count in the tree
    pagekit.shot(page, artifacts_dir, "explorer-default")


def test_clicking_a_layer_on_the_canvas_expands_it_and_clicking_its_frame_collapses(default_url, page, artifacts_dir):
    open_page(page, default_url)
    pagekit.hover_node(page, "mod:model.layers.3")  # its tooltip shows ...
    pagekit.click_node(page, "mod:model.layers.3")
    pagekit.wait_node(page, "mod:model.layers.3", present=False)
    assert not pagekit.tooltip_shown(page)  # ... and a click puts it away (it stayed over the redrawn labels)
    inside = [n for n in pagekit.nodes(page) if n["module"].startswith("model.layers.3")]
    assert any(n["kind"] == "op" for n in inside) and any(n["id"] == "mod:model.layers.3.self_attn" for n in inside)
    expect(page.locator(".tlx-view-summary")).to_contain_text("31 \u00d7 LlamaDecoderLayer")
    pagekit.shot(page, artifacts_dir, "explorer-expanded-layer")
    # a click on the open frame's empty margin (its header strip) collapses it again
    frame = page.evaluate("""() => { const d = Bokeh.documents[Bokeh.documents.length - 1];
        const r = [...d._all_models.values()].find(m => m.name === 'frames'); const s = r.data_source.data;
        const i = s.address.indexOf('model.layers.3'); return [s.right[i] - 4, s.top[i] + 4]; }""")
    page.wait_for_timeout(600)  # outside Bokeh's double-tap window: two quick clicks are one double tap
    page.mouse.click(*pagekit.to_page(page, *frame))
    expect(page.locator(".tlx-last-action")).to_contain_text("collapsed model.layers.3")
    pagekit.wait_node(page, "mod:model.layers.3", present=True)


def test_module_tree_click_expands_a_layer(default_url, page):
    open_page(page, default_url)
    page.locator(".tlx-tree .tlx-tree-name", has_text="0-31: LlamaDecoderLayer x32").first.click()
    pagekit.wait_node(page, "mod:model.layers.0", present=False)
    expect(page.locator(".tlx-inspector")).to_contain_text("Module model.layers.0")


def test_search_selects_an_op_and_the_inspector_shows_its_shape(default_url, default_loaded, page, artifacts_dir):
    op = next(o for o in default_loaded.trace.ops if o.module == "model.layers.0.self_attn.q_proj")
    open_page(page, default_url)
    box = page.locator(".tlx-search input")
    box.fill(op.label)
    box.press("Enter")
    inspector = page.locator(".tlx-inspector")
    expect(inspector).to_contain_text(f"Op {op.label}")
    expect(page.locator(".tlx-field-shape")).to_have_text(str(tuple(op.out.shape)))
    expect(inspector).to_contain_text("model.layers.0.self_attn.q_proj.weight")
    expect(inspector).to_contain_text("HYPOTHESIS: shapes unproven, no values exist")  # the Ladder's one wording
    pagekit.wait_node(page, op.label, present=True)
    pagekit.shot(page, artifacts_dir, "explorer-inspector")


def test_fold_repeated_blocks_draws_one_x32_box(default_url, page):
    open_page(page, default_url)
    page.locator(".tlx-fold input").check()
    page.wait_for_function("() => { const s = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes');"
                           " return s && s.data.kind.indexOf('folded') >= 0; }", timeout=15_000)
    folded = [n for n in pagekit.nodes(page) if n["kind"] == "folded"]
    assert len(folded) == 1 and "x32" in folded[0]["label"]


def test_doctor_panel_lists_rows(default_url, default_loaded, page, artifacts_dir):
    from app.views.doctor import doctor_rows
    from tracer import doctor

    open_page(page, default_url)
    page.locator(".bk-tab", has_text="Doctor").click()
    expected = doctor_rows(doctor(default_loaded.model, default_loaded.inputs))
    page.locator(".tlx-doctor-run button").click()
    expect(page.locator(".tlx-doctor-row")).to_have_count(len(expected), timeout=60_000)
    for row in expected:
        expect(page.locator(".tlx-doctor-rows")).to_contain_text(row["check"])
    pagekit.shot(page, artifacts_dir, "explorer-doctor")


def test_figure_export_downloads_a_valid_svg_with_the_ladder_caption(default_url, page, artifacts_dir):
    open_page(page, default_url)
    page.locator(".bk-tab", has_text="Export").click()
    with page.expect_download(timeout=60_000) as info:
        page.locator(".tlx-export-svg button, .tlx-export-svg a").first.click()
    path = artifacts_dir / "explorer-export.svg"
    info.value.save_as(path)
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    texts = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    assert "HYPOTHESIS" in texts and "LlamaDecoderLayer" in texts
    pagekit.shot(page, artifacts_dir, "explorer-export")


def test_an_8b_float32_twin_is_declined_politely(default_url, default_loaded, page):
    from app import twin

    est = twin.estimate(twin.TwinSpec(config="llama-3.1-8b", dtype="float32"), default_loaded.trace)
    if est.fits:
        pytest.skip("this machine could hold an 8B float32 twin; the decline path needs a smaller one")
    open_page(page, default_url)
    page.locator(".tlx-twin-dtype select").select_option("float32")
    page.locator(".tlx-discharge button").click()
    status = page.locator(".tlx-discharge-status")
    expect(status).to_contain_text("twin_exceeds_memory", timeout=30_000)
    expect(status).to_contain_text("What to do")
    assert "Traceback" not in status.inner_text()
    assert pagekit.banner_state(page) == "HYPOTHESIS"


@pytest.mark.slow
def test_discharging_gpt2_turns_the_banner_corroborated(tiny_gpt2_url, page, artifacts_dir):
    open_page(page, tiny_gpt2_url)
    assert pagekit.banner_state(page) == "HYPOTHESIS"
    page.locator(".tlx-discharge button").click()
    expect(page.locator(".tlx-banner[data-state='CORROBORATED']")).to_be_visible(timeout=120_000)
    expect(page.locator(".tlx-banner-detail")).to_contain_text("every claim holds")
    expect(page.locator(".tlx-claims")).to_contain_text("holds")
    pagekit.shot(page, artifacts_dir, "explorer-corroborated")


@pytest.mark.slow
def test_a_mismatched_twin_turns_the_banner_refuted(tiny_gpt2_url, page, artifacts_dir):
    open_page(page, tiny_gpt2_url)
    page.locator(".tlx-twin-dtype select").select_option("bfloat16")
    page.locator(".tlx-discharge button").click()
    expect(page.locator(".tlx-banner[data-state='REFUTED']")).to_be_visible(timeout=120_000)
    expect(page.locator(".tlx-banner-detail")).to_contain_text("dtype claimed 'float32', observed 'bfloat16'")
    pagekit.shot(page, artifacts_dir, "explorer-refuted")


@pytest.mark.slow
def test_another_config_is_refused_with_a_readable_message(gpt2_url, page):
    open_page(page, gpt2_url)
    # only comparable configs are offered; another one typed as a path is refused by the preflight
    expect(page.locator(".tlx-twin-config select option")).to_have_text(["gpt2"])
    page.locator(".tlx-twin-config-path input").fill(str(ROOT / "static" / "configs" / "bert-base.json"))
    page.locator(".tlx-twin-config-path input").press("Enter")
    page.locator(".tlx-discharge button").click()
    status = page.locator(".tlx-discharge-status")
    expect(status).to_contain_text("twins_not_comparable", timeout=120_000)
    assert "Traceback" not in status.inner_text()
    assert pagekit.banner_state(page) == "HYPOTHESIS"


@pytest.mark.slow
def test_open_in_model_explorer_serves_the_same_graph_on_loopback(gpt2_url, gpt2_loaded, page, artifacts_dir):
    import json
    import urllib.parse
    import urllib.request

    open_page(page, gpt2_url)
    page.locator(".bk-tab", has_text="Export").click()
    page.locator(".tlx-open-me button").click()
    link = page.locator(".tlx-me-href")
    expect(link).to_be_visible(timeout=120_000)
    href = link.get_attribute("href")
    parsed = urllib.parse.urlparse(href)
    assert parsed.hostname == "127.0.0.1"
    base = f"{parsed.scheme}://{parsed.netloc}"
    assert "model_explorer_ok" in urllib.request.urlopen(base + "/check_health", timeout=10).read().decode()
    graph_path = json.loads(urllib.parse.parse_qs(parsed.query)["data"][0])["models"][0]["url"]
    served = json.loads(urllib.request.urlopen(base + "/api/v1/read_text_file?path=" + urllib.parse.quote(graph_path),
                                               timeout=10).read())["content"]
    graph = json.loads(served)["graphs"][0]
    op_nodes = {n["id"] for n in graph["nodes"]}
    assert op_nodes == {op.label for op in gpt2_loaded.trace.ops}
    assert "HYPOTHESIS" in json.loads(served)["label"]
    # every overlay the trace offers travels with the link, as node data Model Explorer reads back
    from exporters import overlays

    data_paths = json.loads(urllib.parse.parse_qs(parsed.query)["data"][0])["nodeData"]
    names = {p.rsplit("/", 1)[-1].split(".")[-3] for p in data_paths}
    assert names == set(overlays.available(gpt2_loaded.trace))
    for p in data_paths:
        data = json.loads(json.loads(urllib.request.urlopen(
            base + "/api/v1/read_text_file?path=" + urllib.parse.quote(p), timeout=10).read())["content"])
        assert set(data[graph["id"]]["results"]) <= op_nodes
    pagekit.shot(page, artifacts_dir, "explorer-model-explorer-link", docs=False)


def test_png_trace_file_and_model_explorer_json_downloads(gpt2_url, gpt2_loaded, page, artifacts_dir):
    import json

    from app.sources import open_path

    open_page(page, gpt2_url)
    page.locator(".bk-tab", has_text="Export").click()
    # served, each download is a link to the server's download route (app.downloads), not a websocket transfer
    expect(page.locator(".tlx-export-me a.tlx-download")).to_have_attribute("href", re.compile(r"^/tlx-download/"))
    got = {}
    for css, name in (("tlx-export-png", "explorer-export.png"), ("tlx-export-trace", "explorer-export.trace.zip"),
                      ("tlx-export-me", "explorer-export.model-explorer.json")):
        with page.expect_download(timeout=60_000) as info:
            page.locator(f".{css} button, .{css} a").first.click()
        got[css] = artifacts_dir / name
        info.value.save_as(got[css])
    assert got["tlx-export-png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    reopened = open_path(got["tlx-export-trace"])
    assert [o.label for o in reopened.trace.ops] == [o.label for o in gpt2_loaded.trace.ops]
    assert reopened.trace.ladder_state == "HYPOTHESIS"
    payload = json.loads(got["tlx-export-me"].read_text())
    assert len(payload["graphs"][0]["nodes"]) == len(gpt2_loaded.trace.ops) and "HYPOTHESIS" in payload["label"]


@pytest.fixture(scope="module")
def url_405b():
    from app.sources import open_config
    from tests.app.conftest import served

    with served(open_config("llama-3.1-405b")) as url:
        yield url


@pytest.mark.slow
def test_the_126_layer_405b_page_starts_folded_and_opens_a_block(url_405b, page, artifacts_dir):
    open_page(page, url_405b)
    folded = [n for n in pagekit.nodes(page) if n["kind"] == "folded"]
    assert len(folded) == 1 and "x126" in folded[0]["label"]
    expect(page.locator(".tlx-fold input")).to_be_checked()
    pagekit.click_node(page, folded[0]["id"])
    pagekit.wait_node(page, "fold:model.layers.1", present=True)
    drawn = pagekit.nodes(page)
    assert any(n["module"].startswith("model.layers.0.") for n in drawn)
    assert next(n for n in drawn if n["id"] == "fold:model.layers.1")["label"].endswith("x125")
    pagekit.shot(page, artifacts_dir, "explorer-405b-folded")
