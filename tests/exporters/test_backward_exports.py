"""Exports of the backward: the two-graph Model Explorer collection (validated, rebuilt through the vendor's
graph_builder, written and read back, served and read back over HTTP), its node-data overlays, the
per-layer memory figure (SVG and PNG) and the `memory-figure` command."""
from __future__ import annotations

import json
import math
import urllib.request
import xml.etree.ElementTree as ET
from urllib.parse import quote

import pytest
import torch

import tracer
from exporters import model_explorer as me
from exporters.backward_figure import SERIES, bar_data, bar_parts, write_memory_figure
from exporters.errors import FigureOptionsError
from exporters.model_explorer.backward import backward_node_data, export_with_backward, with_backward
from tests.tracer.test_backward import _llama
from tests.tracer.test_backward_graph import gpt2_step
from tracer.backward.graph import backward_trace
from tracer.backward.memory import layer_table, op_saved_bytes
from tracer.options import CaptureOptions


@pytest.fixture(scope="module", name="gpt2_step")
def gpt2_step_fixture():
    return gpt2_step()


def test_the_collection_holds_the_forward_and_the_backward_graph(gpt2_step):
    payload = with_backward(gpt2_step)
    report = me.validate_payload(payload)
    b = backward_trace(gpt2_step)
    assert report.graphs == 2 and report.nodes == len(gpt2_step.ops) + len(b.ops)
    assert me.rebuild_with_graph_builder(payload) == payload  # the vendor's dataclasses hold it as written
    forward, backward = payload["graphs"]
    assert forward == me.to_graph_collection(gpt2_step)["graphs"][0]
    assert backward["id"] == me.graph_id(b) and backward["id"] != forward["id"]
    # the same module layers: a node linked to a forward op sits in that op's namespace
    fwd_ns = {n["id"]: n["namespace"] for n in forward["nodes"]}
    for node in backward["nodes"]:
        attrs = {kv["key"]: kv["value"] for kv in node["attrs"]}
        if attrs.get("linked") == "true":
            assert node["namespace"] == fwd_ns[attrs["forward_op"]]
    nodes = {n["id"]: n for n in backward["nodes"]}
    assert [e["sourceNodeId"] for e in nodes["grad_addmm_8"]["incomingEdges"]] == ["grad_view_23"]
    assert backward["groupNodeAttributes"][""]["backward_loss"] == "loss=<lambda>(output)"


def test_backward_overlays_as_node_data(gpt2_step):
    saved = backward_node_data(gpt2_step, "saved_bytes")
    (gid, data), = saved.items()
    assert gid == me.graph_id(backward_trace(gpt2_step)) and data["name"] == "saved for backward (bytes)"
    per_op = op_saved_bytes(gpt2_step.backward)
    assert {k: v["value"] for k, v in data["results"].items()} == {f"grad_{k}": v for k, v in per_op.items()}
    (fgid, fdata), = backward_node_data(gpt2_step, "grad_norm", graph="forward").items()
    assert fgid == me.graph_id(gpt2_step)
    g = gpt2_step.backward.grads["addmm_8"]
    assert math.isclose(fdata["results"]["addmm_8"]["value"], float(torch.linalg.vector_norm(g.double())), rel_tol=1e-9)
    with pytest.raises(me.payload.overlays.OverlayOptionsError):
        backward_node_data(gpt2_step, "flops")


def _get(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as resp:
        return resp.read().decode("utf-8")


def test_export_writes_and_reads_back(gpt2_step, tmp_path):
    written = export_with_backward(gpt2_step, tmp_path / "step.json")
    assert set(written) == {"graph", "forward.saved_bytes", "backward.saved_bytes", "forward.grad_norm",
                            "backward.grad_norm"}
    back = json.loads(written["graph"].read_text(encoding="utf-8"))
    assert back == with_backward(gpt2_step) and me.rebuild_with_graph_builder(back) == back
    assert json.loads(written["backward.saved_bytes"].read_text()) == backward_node_data(gpt2_step, "saved_bytes")


@pytest.mark.slow
def test_model_explorer_serves_the_two_graphs(gpt2_step, tmp_path):
    written = export_with_backward(gpt2_step, tmp_path / "step.json")
    path = written["graph"]
    server = me.serve(path, node_data=[written["backward.saved_bytes"]])
    with server:
        assert _get(f"{server.base_url}/check_health") == "model_explorer_ok"
        served = json.loads(_get(f"{server.base_url}/api/v1/read_text_file?path={quote(str(path))}"))
    assert [g["id"] for g in json.loads(served["content"])["graphs"]] == [g["id"] for g in with_backward(gpt2_step)["graphs"]]


@pytest.fixture(scope="module")
def llama_table():
    loss = lambda o: o.logits.sum()  # noqa: E731
    meta = CaptureOptions(structure_only=True, backward=True)
    return layer_table(tracer.trace(*_llama(True, False), capture=meta, loss=loss),
                       tracer.trace(*_llama(True, True), capture=meta, loss=loss))


def test_memory_figure_svg_and_png(llama_table, tmp_path):
    data = bar_data(llama_table)
    assert len(data["layer"]) == 2 * len(llama_table.rows)  # each layer: without and with checkpointing
    svg = write_memory_figure(llama_table, tmp_path / "mem.svg")
    root = ET.fromstring(svg.read_text(encoding="utf-8"))
    ns = "{http://www.w3.org/2000/svg}"
    fills = [r.get("fill") for r in root.iter(f"{ns}rect")]
    assert sum(f in {c for _n, c in SERIES} | {"#fdd0a2"} for f in fills) >= 3 * len(data["layer"])
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "0" in texts and "1" in texts and "(rest)" in texts and any("weights-free" in t for t in texts)
    # bar heights follow the bytes: layer 0's saved segment without and with checkpointing, its parameters
    _height, parts = bar_parts(llama_table, 7 * 72)
    rects = [p for p in parts if not p.text and p.fill != "#dddddd"][:3 * len(data["layer"])]
    saved = data["saved for backward"]
    assert math.isclose(rects[2].h / rects[5].h, saved[0] / saved[1], rel_tol=1e-9)
    assert rects[0].h == rects[3].h and rects[2].fill != rects[5].fill
    png = write_memory_figure(llama_table, tmp_path / "mem.png", width="column", dpi=100)
    from PIL import Image

    with Image.open(png) as img:
        assert img.size[0] == round(3.4 * 100)
    with pytest.raises(FigureOptionsError):
        write_memory_figure(llama_table, tmp_path / "mem.pdf")


def test_memory_figure_command(tmp_path, capsys):
    from app.cli import main

    from transformers import LlamaConfig

    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, architectures=["LlamaForCausalLM"])
    cfg.to_json_file(str(tmp_path / "config.json"))
    out = tmp_path / "mem.svg"
    assert main(["memory-figure", str(tmp_path / "config.json"), "--input-shape", "1,16", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "model.layers.1" in printed and "ckpt MiB" in printed and out.is_file()
    assert main(["memory-figure", str(tmp_path / "config.json"), "--out", str(tmp_path / "m.pdf")]) == 2
