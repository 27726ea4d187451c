"""The side actions answer where a person looks (issue 36 item 5): doctor, memory estimate, Model Explorer
download and link, Expand all. No timing is asserted here (tests/bench/bench_side_actions.py times them);
these check what runs where and that each result lands inside the window at 1366x768.
"""
from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from app import twin
from app.state import ExplorerState
from tests.app import pagekit

SIZE = (1366, 768)

# The first element matching a selector, through Panel's shadow roots: its box in page pixels.
RECT_JS = "sel => { " + pagekit.FIND_JS + """ const el = find(document, sel); if (!el) return null;
  const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"""


def in_window(page, selector: str) -> bool:
    r = page.evaluate(RECT_JS, selector)
    return r is not None and r[3] > r[1] and r[0] >= -1 and r[1] >= -1 and r[2] <= SIZE[0] + 1 and r[3] <= SIZE[1] + 1


def test_the_panels_doctor_is_the_doctor_of_the_explored_model(gpt2_loaded):
    from app.views.doctor import doctor_here, doctor_rows
    from tracer.compat.doctor import doctor

    here = doctor_here(gpt2_loaded)
    assert doctor_rows(here) == doctor_rows(doctor(gpt2_loaded.model, gpt2_loaded.inputs))
    assert here.model_class == type(gpt2_loaded.model).__name__ and here.applicable


def test_the_estimate_of_the_traces_own_config_is_made_here_and_another_configs_in_a_worker(gpt2_loaded):
    from app.views.discharge import estimate_for_panel

    _, attn = twin.structure_defaults(gpt2_loaded.trace)
    for config, where in (("gpt2", "structure's own counts"), ("bert-base", "worker process")):
        said = []
        spec = twin.TwinSpec(config=config, attn=attn, input_shape="2,8")
        got = estimate_for_panel(spec, gpt2_loaded.trace, lambda _f, text: said.append(text))
        assert any(where in text for text in said), (config, said)
        want = twin.estimate(spec, gpt2_loaded.trace)
        assert (got.params, got.param_bytes, got.activation_bytes) == (want.params, want.param_bytes, want.activation_bytes)


def test_the_model_explorer_download_is_the_python_apis_export(gpt2_loaded, tmp_path):
    from app.views.export import export_for_download
    from exporters.model_explorer.backward import export_graphs

    state = ExplorerState(gpt2_loaded)
    got = json.loads(export_for_download(state, tmp_path / "app.json", "model-explorer").read_text())
    want = json.loads(export_graphs(gpt2_loaded.trace, tmp_path / "api.json").read_text())
    assert got == want and len(got["graphs"][0]["nodes"]) == len(gpt2_loaded.trace.ops)


def test_sessions_of_one_trace_share_one_model_explorer(gpt2_loaded):
    import urllib.request

    from app.views.export import shared_model_explorer

    a, b = ExplorerState(gpt2_loaded), ExplorerState(gpt2_loaded)
    first = shared_model_explorer(a)
    assert shared_model_explorer(b) is first  # asked before it answers: the same start
    server = first.result(timeout=180)
    assert shared_model_explorer(b).result() is server
    base = server.url.split("/?", 1)[0]
    assert "model_explorer_ok" in urllib.request.urlopen(base + "/check_health", timeout=10).read().decode()


def open_page(page, url):
    page.set_viewport_size({"width": SIZE[0], "height": SIZE[1]})
    page.goto(url)
    pagekit.wait_graph(page)
    page.wait_for_selector(".tlx-tabs", state="attached", timeout=60_000)


@pytest.mark.browser
def test_each_side_actions_result_lands_in_the_window(default_url, default_loaded, page, artifacts_dir):
    open_page(page, default_url)
    # the memory estimate: its line under the Discharge tab's buttons
    page.locator(".tlx-estimate button:not([disabled])").click(timeout=60_000)
    status = page.locator(".tlx-discharge-status")
    expect(status).to_contain_text("Estimate:", timeout=120_000)
    assert in_window(page, ".tlx-discharge-status"), page.evaluate(RECT_JS, ".tlx-discharge-status")
    pagekit.shot(page, artifacts_dir, "side-estimate-1366x768", docs=False)
    # the doctor: its first row inside the window
    page.locator(".bk-tab", has_text="Doctor").click()
    page.locator(".tlx-doctor-run button").click()
    expect(page.locator(".tlx-doctor-row").first).to_be_visible(timeout=120_000)
    assert in_window(page, ".tlx-doctor-row")
    expect(page.locator(".tlx-doctor-note")).to_contain_text("rows for LlamaForCausalLM")
    pagekit.shot(page, artifacts_dir, "side-doctor-1366x768", docs=False)
    # the Model Explorer JSON download, and its status line in view
    page.locator(".bk-tab", has_text="Export").click()
    with page.expect_download(timeout=120_000) as info:
        page.locator(".tlx-export-me button, .tlx-export-me a").first.click()
    payload = json.loads(open(info.value.path()).read())
    assert len(payload["graphs"][0]["nodes"]) == len(default_loaded.trace.ops)
    expect(page.locator(".tlx-export-status")).to_contain_text("Wrote")
    assert in_window(page, ".tlx-export-status")
    # Open in Model Explorer: the link in view
    page.locator(".tlx-open-me button").click()
    expect(page.locator(".tlx-me-href")).to_be_visible(timeout=180_000)
    assert in_window(page, ".tlx-me-href")
    pagekit.shot(page, artifacts_dir, "side-export-1366x768", docs=False)
    # Expand all on the 8B (1,979 ops, 2,458 edges): drawn, or refused saying how big and what to do, in view
    page.locator("[data-tlx-act='view:expand-all']").first.click()
    said = page.locator(".tlx-last-action")
    expect(said).to_contain_text(re.compile(r"Opened every module|Not drawn: 2,458 edges"), timeout=120_000)
    if "Not drawn" in said.inner_text():
        expect(said).to_contain_text("the view stays as it was")
        # why and what to do are drawn inside the one-line status (it cuts its end at this width)
        assert pagekit.status_words_drawn(page, "Open fewer modules"), said.inner_text()
    start = page.evaluate(RECT_JS, ".tlx-last-action")  # where it starts: in view (the status line may cut its end)
    assert start is not None and 0 <= start[0] < SIZE[0] and 0 <= start[1] < SIZE[1], start
    pagekit.shot(page, artifacts_dir, "side-expand-all-1366x768", docs=False)
