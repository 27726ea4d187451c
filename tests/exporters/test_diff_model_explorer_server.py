"""The diff collection served by the real Model Explorer: read back over HTTP, and opened in Chromium."""
from __future__ import annotations

import json
import urllib.request
from urllib.parse import parse_qs, quote, urlparse

import pytest
import torch

import tracer
from exporters import model_explorer as me
from exporters.model_explorer.diff import diff_graph_ids, export_diff
from tests.models import tiny_gpt2

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
IDS = torch.tensor([[5, 17, 3, 42, 8, 99, 1, 60]])


def _get(url: str) -> str:
    with _NO_PROXY.open(url, timeout=10) as resp:
        return resp.read().decode("utf-8")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    a, b = tracer.trace(tiny_gpt2(2), (IDS,)), tracer.trace(tiny_gpt2(3), (IDS,))
    d = tracer.diff(a, b)
    graph, data = export_diff(d, a, b, tmp_path_factory.mktemp("me") / "diff.json")
    return d, a, b, graph, data


@pytest.mark.slow
def test_served_model_explorer_reads_back_the_diff(exported):
    _, _, _, graph, data = exported
    server = me.serve(graph, node_data=[data])
    with server as url:
        assert _get(f"{server.base_url}/check_health") == "model_explorer_ok"
        served = json.loads(_get(f"{server.base_url}/api/v1/read_text_file?path={quote(str(graph))}"))
        assert served["content"] == graph.read_text(encoding="utf-8")
        served_data = json.loads(_get(f"{server.base_url}/api/v1/read_text_file?path={quote(str(data))}"))
        assert served_data["content"] == data.read_text(encoding="utf-8")
        assert json.loads(parse_qs(urlparse(url).query)["data"][0])["nodeData"] == [str(data.resolve())]


@pytest.mark.slow
@pytest.mark.browser
def test_chromium_opens_both_graphs_of_the_diff(exported, page, artifacts_dir):
    d, a, b, graph, data = exported
    ids = diff_graph_ids(d, a, b)
    server = me.serve(graph, node_data=[data])
    with server as url:
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(url)
        page.get_by_placeholder("Search nodes/layers by regex").wait_for(timeout=60_000)
        page.get_by_text(f"{len(b.ops)} nodes").first.wait_for(timeout=60_000)  # side b, the larger graph, opens first
        page.wait_for_timeout(500)
        page.screenshot(path=str(artifacts_dir / "model_explorer_diff.png"))
        text = page.locator("body").inner_text()
    assert ids["b"] in text and "divergence" in text
