"""Diff exports on real tiny GPT-2 traces: the figure (coloured, captioned), the Model Explorer
collection of both graphs (validator and vendor rebuild) and its divergence node data."""
from __future__ import annotations

import copy
import json

import pytest
import torch

import tracer
from exporters import figures
from exporters.diff_figure import diff_scene
from exporters.diff_overlay import STRUCTURAL, diff_caption, divergence_scores, drawn_side
from exporters.model_explorer import rebuild_with_graph_builder, validate_payload
from exporters.model_explorer.diff import diff_collection, diff_graph_ids, diff_node_data, export_diff
from tests.models import tiny_gpt2

IDS = torch.tensor([[5, 17, 3, 42, 8, 99, 1, 60]])


@pytest.fixture(scope="module")
def planted():
    model = tiny_gpt2()
    a = tracer.trace(model, (IDS,))
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.transformer.h[1].ln_1.weight.mul_(2.0)
    b = tracer.trace(other, (IDS,))
    return a, b, tracer.diff(a, b)


@pytest.fixture(scope="module")
def inserted():
    a, b = tracer.trace(tiny_gpt2(2), (IDS,)), tracer.trace(tiny_gpt2(3), (IDS,))
    return a, b, tracer.diff(a, b)


def test_scores_follow_the_diff(planted, inserted):
    a, _, d = planted
    scores = divergence_scores(d, "a")
    first = d.first_divergence
    assert scores[first.label_a] == first.rel_l2 > 0
    assert all(scores[x.label_a] == 0.0 for x in d.divergences if x.index < first.index)
    _, b3, d3 = inserted
    assert drawn_side(d3) == "b"
    side_b = divergence_scores(d3, "b")
    assert all(side_b[op.label] == STRUCTURAL for op in d3.added_ops)
    assert set(side_b) == {op.label for op in b3.ops}


def test_figure_is_coloured_by_divergence_and_captioned(planted, tmp_path):
    a, b, d = planted
    scene = diff_scene(d, a, b, fold_repeats=False, expanded={"", "transformer", "transformer.h", "transformer.h.1"})
    assert "first divergence: layer_norm" in scene.caption and "against b:" in scene.caption
    assert scene.legend["title"].startswith("divergence")
    ln_1 = next(n for n in scene.layout.nodes if n.module == "transformer.h.1.ln_1" or n.op_label == d.first_divergence.label_a)
    wte = next(n for n in scene.layout.nodes if "wte" in (n.module or "") or "wte" in n.id)
    assert scene.fills[ln_1.id] != scene.fills[wte.id]  # the diverged box and an equal one differ in colour
    size = figures.figure_size(scene, "page")
    out = figures.write_scene(scene, tmp_path / "d.svg", size, "svg")
    text = out.read_text()
    assert "<svg" in text and "against b:" in text
    assert diff_caption(d) in scene.caption


def test_model_explorer_collection_passes_the_vendor_rebuild(inserted, tmp_path):
    a, b, d = inserted
    payload = diff_collection(d, a, b)
    validate_payload(payload)
    assert rebuild_with_graph_builder(payload) == payload
    ids = diff_graph_ids(d, a, b)
    assert [g["id"] for g in payload["graphs"]] == [ids["a"], ids["b"]]
    nodes_b = {n["id"]: n for n in payload["graphs"][1]["nodes"]}
    added = d.added_ops[0].label
    assert {"key": "diff", "value": "only in b (added)"} in nodes_b[added]["attrs"]
    graph, data = export_diff(d, a, b, tmp_path / "diff.json")
    assert json.loads(graph.read_text()) == payload


def test_node_data_matches_the_vendor_format(planted):
    from model_explorer import node_data_builder as ndb

    a, b, d = planted
    data = diff_node_data(d, a, b)
    assert set(data) == set(diff_graph_ids(d, a, b).values())
    rebuilt = {gid: ndb.GraphNodeData(results={k: ndb.NodeDataResult(**v) for k, v in g["results"].items()},
                                      name=g["name"], gradient=[ndb.GradientItem(**x) for x in g["gradient"]])
               for gid, g in data.items()}
    assert json.loads(ndb.ModelNodeData(graphsData=rebuilt).to_json_string()) == data
    first = d.first_divergence
    assert data[diff_graph_ids(d, a, b)["a"]]["results"][first.label_a]["value"] == first.rel_l2
