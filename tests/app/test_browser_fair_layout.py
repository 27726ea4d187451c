"""Fair sessions (issue 39) in Chromium against the app served in-process: a big view is laid out off the
loop and painted when its layout lands (the status line says while it runs), and a view refused after
unfolding leaves the fold checkbox checked, as the state is."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.app import pagekit
from tests.app.conftest import served

pytestmark = pytest.mark.browser


def open_page(page, url):
    page.goto(url)
    expect(page.locator(".tlx-banner")).to_be_visible(timeout=60_000)
    pagekit.wait_graph(page)


@pytest.fixture(scope="module")
def dense_url():
    from app.factory import open_factory

    with served(open_factory("tests.bench.dense_edges:dense_model", (2, 4))) as url:
        yield url


@pytest.fixture(scope="module")
def url_405b():
    from app.sources import open_config

    with served(open_config("llama-3.1-405b")) as url:
        yield url


def test_expand_all_on_the_dense_graph_is_laid_out_off_the_loop_and_painted(dense_url, page, monkeypatch):
    """With the bounds raised past the whole dense graph (11,626 edges), Expand all is laid out on a
    worker thread (over `OFF_LOOP_EDGES`) and its result painted: every op drawn, the status line done."""
    from app import state, view_budget
    from tests.bench.dense_edges import BLOCKS, STAGES

    open_page(page, dense_url)
    monkeypatch.setattr(view_budget, "MAX_DRAWN_EDGES", 50_000)  # the server runs in this process
    monkeypatch.setattr(state, "EXPAND_ALL_MAX_EDGES", 50_000)
    page.locator(".tlx-tool-link", has_text="Expand all").click()
    expect(page.locator(".tlx-last-action")).to_contain_text("Opened every module", timeout=30_000)
    page.wait_for_function("""n => { const d = Bokeh.documents[Bokeh.documents.length - 1];
        const s = d.get_model_by_name('tlx-nodes'); return s && s.data.kind.filter(k => k === 'op').length >= n; }""",
                           arg=STAGES * BLOCKS * 3, timeout=120_000)  # stack, mean and tanh per block
    expect(page.locator(".tlx-view-summary")).not_to_contain_text("in the background", timeout=60_000)
    assert not any(n["kind"] == "module" for n in pagekit.nodes(page))


def test_a_view_refused_after_unfolding_leaves_the_fold_box_checked(url_405b, page, monkeypatch):
    """The 126-layer page starts folded; with the bound just under that view, unchecking the box is refused:
    the page's box is checked again, as the state is (it stayed unchecked before)."""
    from app import view_budget

    open_page(page, url_405b)
    box = page.locator(".tlx-fold input")
    expect(box).to_be_checked()
    monkeypatch.setattr(view_budget, "MAX_DRAWN_EDGES", 600)  # the folded view counts 638 (below the default 1,000)
    box.click()  # uncheck (not `uncheck()`, which insists the box stays unchecked)
    expect(page.locator(".tlx-last-action")).to_contain_text("Not drawn", timeout=30_000)
    expect(box).to_be_checked(timeout=15_000)
    assert any(n["kind"] == "folded" for n in pagekit.nodes(page))
