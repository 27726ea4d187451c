"""The Compare tab in Chromium: a bf16 twin of a served tiny GPT-2, coloured graph, both claim
states, the tolerance recolour and the jump to the first divergence."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.app import pagekit
from tests.app.conftest import served

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def gpt2_factory_url():
    from app.factory import open_factory

    with served(open_factory("tests.models:tiny_gpt2", (1, 8))) as url:
        yield url


def test_compare_tab_diffs_a_bf16_twin_and_jumps_to_the_first_divergence(gpt2_factory_url, page, artifacts_dir):
    page.goto(gpt2_factory_url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)
    page.locator(".bk-tab", has_text="Compare").click()
    page.locator(".tlx-compare-against select").select_option("bfloat16 twin of this model")
    page.locator(".tlx-compare-run button").click()
    sides = page.locator(".tlx-compare-sides")
    expect(sides).to_contain_text("bfloat16", timeout=60_000)
    expect(page.locator(".tlx-compare-side[data-side='a'] .tlx-compare-state")).to_have_text("OBSERVED")
    expect(page.locator(".tlx-compare-legend")).to_contain_text("divergence")
    expect(page.locator(".tlx-compare-modules")).to_contain_text("transformer")
    fills = page.evaluate("""() => { const d = Bokeh.documents[Bokeh.documents.length - 1];
        const r = [...d._all_models.values()].filter(m => m.name === 'nodes');
        return r.map(m => [...new Set(m.data_source.data.fill)].length); }""")
    assert max(fills) > 1  # some compare-graph boxes are coloured apart from the rest
    page.locator(".tlx-compare-jump button").click()
    expect(page.locator(".tlx-compare-note")).to_contain_text("First divergence:", timeout=30_000)
    expect(page.locator(".tlx-compare-stats")).to_contain_text("mean")
    expect(page.locator(".tlx-inspector")).to_contain_text("Op ", timeout=30_000)  # the explorer follows
    pagekit.shot(page, artifacts_dir, "explorer-compare", docs=False)


def test_a_finished_comparison_recolours_the_main_graph_until_cleared(gpt2_factory_url, page, artifacts_dir):
    """Issue 36 item 7: the comparison colours the main canvas by divergence, with a legend saying so,
    and "Clear comparison colours" gives the main canvas its op-kind colours back."""
    from exporters import overlays

    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(gpt2_factory_url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=30_000)
    pagekit.wait_graph(page)
    before = {n["id"]: n["fill"] for n in pagekit.nodes(page)}
    main_legend = page.locator(".tlx-legend-pane")
    expect(main_legend).not_to_contain_text("divergence")
    page.locator(".bk-tab", has_text="Compare").click()
    page.locator(".tlx-compare-against select").select_option("bfloat16 twin of this model")
    page.locator(".tlx-compare-run button").click()
    expect(main_legend).to_contain_text("divergence", timeout=60_000)
    expect(main_legend).to_contain_text("beyond the tolerance")
    page.wait_for_function("""(before) => { const s = Bokeh.documents[Bokeh.documents.length - 1]
        .get_model_by_name('tlx-nodes'); return s && s.data.fill.some((f, i) => f !== before[s.data.id[i]]); }""",
                           arg=before, timeout=30_000)
    after = {n["id"]: n["fill"] for n in pagekit.nodes(page)}
    scale = {overlays.palette_at(i / 100_000) for i in range(100_001)} | {overlays.NO_VALUE}
    assert after.keys() == before.keys() and after != before
    assert set(after.values()) <= scale  # every main-canvas box on the divergence scale
    assert len(set(after.values()) - {overlays.NO_VALUE, overlays.palette_at(0.0)}) >= 1  # some diverge
    assert page.locator(".tlx-overlay select").input_value() != "op kind"
    pagekit.shot(page, artifacts_dir, "explorer-compare-main-1366x768", docs=False)
    page.locator(".tlx-compare-clear button").click()
    expect(main_legend).not_to_contain_text("divergence", timeout=30_000)
    page.wait_for_function("""(before) => { const s = Bokeh.documents[Bokeh.documents.length - 1]
        .get_model_by_name('tlx-nodes'); return s && s.data.fill.every((f, i) => f === before[s.data.id[i]]); }""",
                           arg=before, timeout=30_000)
    assert page.locator(".tlx-overlay select").input_value() == "op kind"
