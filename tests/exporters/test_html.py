"""The self-contained HTML file: what it carries, that names stay text, and typed refusals."""
from __future__ import annotations

import base64
import gzip
import json
import re

import pytest
import torch
from torch import nn

import tracer
from exporters.html import HtmlWriteError, html_document, write_html
from exporters.html.data import orthogonal_points, page_data, view_expansions
from exporters.layout import LayoutEngine
from tests.models import tiny_gpt2

MARKUP = "<img src=x onerror=alert(1)>"
ROOT_CLASS = "<svg onload=alert(2)>Net"


def markup_model() -> nn.Module:
    """A real module tree whose class and child names carry markup."""
    block = type("<script>alert('cls')</script>Block", (nn.Module,), {
        "__init__": lambda self: (nn.Module.__init__(self), setattr(self, "fc", nn.Linear(4, 4)))[0],
        "forward": lambda self, x: torch.relu(self.fc(x)) + x,
    })
    root = type(ROOT_CLASS, (nn.Sequential,), {})()
    root.add_module(MARKUP, block())
    root.add_module("out", nn.Linear(4, 2))
    return root.eval()


@pytest.fixture(scope="module")
def gpt2_trace():
    return tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))


@pytest.fixture(scope="module")
def markup_trace():
    return tracer.trace(markup_model(), (torch.randn(2, 4),))


def unpack(text: str) -> dict:
    packed = re.search(r'<script id="tlx-data" type="application/octet-stream">([^<]*)</script>', text).group(1)
    return json.loads(gzip.decompress(base64.b64decode(packed)))


def test_page_carries_every_op_and_a_view_per_open_path(gpt2_trace, tmp_path):
    path = write_html(gpt2_trace, tmp_path / "g.html")
    data = unpack(path.read_text())
    assert data["ops"]["label"] == [op.label for op in gpt2_trace.ops]
    assert data["ladder"] == gpt2_trace.ladder_state == "OBSERVED"
    expansions = [frozenset(v["expanded"]) for v in data["views"]]
    assert expansions == view_expansions(LayoutEngine(gpt2_trace))
    assert any("transformer.h.0.attn" in e for e in expansions)
    for i, (vi, node_id) in enumerate(data["where"]):  # every op can be shown: its box exists in that view
        assert node_id in {n[0] for n in data["views"][vi]["nodes"]}, data["ops"]["label"][i]
    names = [o["name"] for o in data["overlays"]]
    assert names[:4] == ["parameters", "output_bytes", "flops", "claim_state"]
    assert {"act_mean", "act_std", "act_max_abs", "act_nonfinite"} <= set(names)  # tiny GPT-2 saved values


def test_page_needs_no_network(gpt2_trace):
    text = html_document(gpt2_trace)
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text)
    assert "default-src 'none'" in text


def test_markup_in_names_is_data_not_html(markup_trace):
    text = html_document(markup_trace)
    assert "<script>alert" not in text and "<img" not in text and "<svg" not in text  # names stay in the packed data
    assert markup_trace.model_class == ROOT_CLASS
    data = unpack(text)
    assert MARKUP in data["ops"]["module"] or any(MARKUP in m for m in data["modules"])
    titled = html_document(markup_trace, title="<b>bold</b>")
    assert "&lt;b&gt;bold&lt;/b&gt;" in titled and "<b>bold</b>" not in titled


def test_user_overlay_reaches_the_page(gpt2_trace):
    label = gpt2_trace.ops[5].label
    data = page_data(gpt2_trace, overlay={label: 7.5, "transformer.h.0": 3})
    user = data["overlays"][-1]
    assert user["name"] == "user" and user["values"][5] == 7.5 and user["modules"] == {"transformer.h.0": 3.0}


def test_unwritable_path_refuses_typed(gpt2_trace, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(HtmlWriteError) as err:
        write_html(gpt2_trace, blocker / "g.html")
    assert err.value.code == "html_write_failed"


def _decode(values: list[int]) -> list[tuple[int, int]]:
    """The page's reading of an edge (page.js): x0, y0, then y and x in turn."""
    x, y = values[0], values[1]
    points = [(x, y)]
    for i, v in enumerate(values[2:]):
        if i % 2 == 0:
            y = v
        else:
            x = v
        points.append((x, y))
    return [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]


def test_edges_are_carried_as_alternating_coordinates(gpt2_trace):
    """Every view's edges decode to the layout's polylines rounded to whole units, in about half the numbers."""
    engine = LayoutEngine(gpt2_trace)
    data = page_data(gpt2_trace)
    carried = written = 0
    for view, exp in zip(data["views"], view_expansions(engine)):
        layout = engine.layout(exp)
        assert [[e[0], e[1]] for e in view["edges"]] == [[e.source, e.target] for e in layout.edges]
        for packed, edge in zip(view["edges"], layout.edges):
            rounded = [(round(x), round(y)) for x, y in edge.points]
            assert _decode(packed[2]) == [p for i, p in enumerate(rounded) if i == 0 or p != rounded[i - 1]]
            carried += len(packed[2])
            written += 2 * len(edge.points)
    assert carried < 0.7 * written
    # a step across where one down is due, a repeated point and a diagonal
    assert orthogonal_points([(0, 0), (5, 0), (5, 0), (5, 9), (7, 12)]) == [0, 0, 0, 5, 9, 7, 12]
    assert _decode([0, 0, 0, 5, 9, 7, 12]) == [(0, 0), (5, 0), (5, 9), (7, 9), (7, 12)]
