"""Model Explorer export: schema, golden JSON, validator, vendor rebuild, node-data overlay, counts."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import tracer
from exporters import model_explorer as me
from tests.models import tiny_gpt2, tiny_resnet
from exporters.errors import ModelExplorerPayloadError
from tracer.estimates import op_flops, op_output_bytes

GOLDEN = Path(__file__).parent / "golden" / "tiny_net.model_explorer.json"
ROOT = Path(__file__).resolve().parents[2]


class TinyNet(nn.Module):
    """Nested modules, a module called twice, and a root-level op."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.shared = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.shared(self.body(x))
        h = self.shared(torch.tanh(h))
        return self.head(h)


@pytest.fixture(scope="module")
def tiny_trace():
    torch.manual_seed(0)
    return tracer.trace(TinyNet().eval(), (torch.randn(3, 4),))


@pytest.fixture(scope="module")
def gpt2_trace():
    return tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))


def canonical(payload: dict) -> str:
    """Sorted keys, floats rounded, source paths reduced to file name (machine independent)."""

    def walk(value):
        if isinstance(value, dict):
            if value.get("key") == "source" and isinstance(value.get("value"), str):
                return {"key": "source", "value": os.path.basename(value["value"])}
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, float):
            return round(value, 6)
        return value

    return json.dumps(walk(payload), sort_keys=True, indent=1, ensure_ascii=False) + "\n"


# -- schema and golden ---------------------------------------------------------------------
def test_golden_canonical_json(tiny_trace):
    got = canonical(me.to_graph_collection(tiny_trace))
    if os.environ.get("TLX_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(got, encoding="utf-8")
    assert GOLDEN.is_file(), "no golden yet: run with TLX_UPDATE_GOLDEN=1 once and review the file"
    assert got == GOLDEN.read_text(encoding="utf-8"), "export changed: review, then regenerate with TLX_UPDATE_GOLDEN=1"


def test_nodes_edges_and_metadata_follow_the_trace(tiny_trace):
    payload = me.to_graph_collection(tiny_trace)
    graph = payload["graphs"][0]
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert [n["id"] for n in graph["nodes"]] == [op.label for op in tiny_trace.ops]
    for op in tiny_trace.ops:
        node = nodes[op.label]
        edges = node["incomingEdges"]
        assert [e["sourceNodeId"] for e in edges] == [p.source for p in op.parents]
        assert [e["sourceNodeOutputId"] for e in edges] == [str(tiny_trace[p.source].output_index) for p in op.parents]
        tags = [m["attrs"][0]["value"] for m in node["inputsMetadata"]]
        assert tags == [p.position for p in op.parents]
        out = {kv["key"]: kv["value"] for kv in node["outputsMetadata"][0]["attrs"]}
        assert out["tensor_name"] == op.label
        assert out["dtype"] == op.out.dtype
        assert out["tensor_shape"] == f"{op.out.dtype}[{', '.join(map(str, op.out.shape))}]"
        attrs = {kv["key"]: kv["value"] for kv in node["attrs"]}
        assert attrs["function"] == op.func and attrs["claim_state"] == "OBSERVED"
        if op.params:
            assert attrs["parameters"] == ", ".join(op.params)
    # the second call of `shared` is its own layer; root ops and inputs sit at the top level
    shared_ns = sorted({n["namespace"] for n in graph["nodes"] if n["namespace"].startswith("shared")})
    assert shared_ns == ["shared (Linear)", "shared:1 (Linear)"]
    assert nodes["tanh_1"]["namespace"] == "" and nodes["input_1"]["namespace"] == ""
    assert nodes["linear_1"]["namespace"] == "body (Sequential)/0 (Linear)"  # layers named with their class
    groups = graph["groupNodeAttributes"]
    assert groups["body (Sequential)"] == {"module": "body", "class": "Sequential", "parameters": "40", "calls": "1"}
    assert groups["shared:1 (Linear)"]["module"] == "shared:1" and groups["shared:1 (Linear)"]["calls"] == "2"
    assert groups[""]["ladder_state"] == "OBSERVED" and groups[""]["parameters"] == str(tiny_trace.param_count())
    assert graph["id"] == "TinyNet [OBSERVED]" and payload["label"] == "TinyNet · OBSERVED"


def test_export_writes_the_payload(tiny_trace, tmp_path):
    path = me.export(tiny_trace, tmp_path / "sub" / "tiny.json")
    assert json.loads(path.read_text(encoding="utf-8")) == me.to_graph_collection(tiny_trace)


def test_single_child_layers_option(tiny_trace):
    kept = me.to_graph_collection(tiny_trace, keep_single_child_layers=True)
    assert kept["graphs"][0]["layoutConfigs"] == {"keepLayersWithASingleChild": True}


# -- validator -------------------------------------------------------------------------------
def test_validator_counts_a_valid_payload(tiny_trace):
    report = me.validate_payload(me.to_graph_collection(tiny_trace))
    assert report.graphs == 1
    assert report.nodes == len(tiny_trace.ops) and report.edges == tiny_trace.num_edges
    assert report.layers == 6  # body, body/0, body/1, shared, shared:1, head


def _break(payload: dict, how: str) -> dict:
    bad = copy.deepcopy(payload)
    nodes = bad["graphs"][0]["nodes"]
    with_edge = next(n for n in nodes if n["incomingEdges"])
    if how == "duplicate_id":
        nodes[1]["id"] = nodes[0]["id"]
    elif how == "missing_source":
        with_edge["incomingEdges"][0]["sourceNodeId"] = "nope_1"
    elif how == "missing_output":
        with_edge["incomingEdges"][0]["sourceNodeOutputId"] = "7"
    elif how == "namespace":
        nodes[1]["namespace"] = "body//0"
    elif how == "unknown_group":
        bad["graphs"][0]["groupNodeAttributes"]["ghost"] = {"class": "X"}
    elif how == "double_input":
        with_edge["incomingEdges"].append(dict(with_edge["incomingEdges"][0]))
    elif how == "no_graphs":
        bad["graphs"] = []
    return bad


@pytest.mark.parametrize("how", ["duplicate_id", "missing_source", "missing_output", "namespace",
                                 "unknown_group", "double_input", "no_graphs"])
def test_validator_refuses_broken_payloads(tiny_trace, how):
    with pytest.raises(ModelExplorerPayloadError) as info:
        me.validate_payload(_break(me.to_graph_collection(tiny_trace), how))
    err = info.value
    assert err.code == "model_explorer_payload_invalid" and err.site and err.remedy
    assert err.findings["count"] >= 1 and err.findings["problems"]


# -- vendor rebuild ----------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["tiny", "gpt2", "resnet"])
def test_rebuild_through_graph_builder_equals_export(which, tiny_trace, gpt2_trace):
    if which == "tiny":
        trace = tiny_trace
    elif which == "gpt2":
        trace = gpt2_trace
    else:
        trace = tracer.trace(tiny_resnet(), (torch.randn(1, 3, 16, 16),))
    payload = me.to_graph_collection(trace)
    assert me.rebuild_with_graph_builder(payload) == payload


def test_rebuild_refuses_keys_outside_the_schema(tiny_trace):
    payload = me.to_graph_collection(tiny_trace)
    payload["graphs"][0]["nodes"][0]["colour"] = "red"
    with pytest.raises(TypeError):
        me.rebuild_with_graph_builder(payload)


# -- node-data overlay --------------------------------------------------------------------------
def test_node_data_matches_vendor_format_and_estimates(gpt2_trace, tmp_path):
    from model_explorer import node_data_builder as ndb

    files = me.export_node_data(gpt2_trace, tmp_path / "gpt2.json")
    assert set(files) == set(me.NODE_DATA_METRICS)
    gid = me.graph_id(gpt2_trace)
    for metric, path in files.items():
        data = json.loads(path.read_text())
        assert list(data) == [gid]
        graph = data[gid]
        assert set(graph["results"]) == {op.label for op in gpt2_trace.ops}
        rebuilt = ndb.GraphNodeData(
            results={k: ndb.NodeDataResult(**v) for k, v in graph["results"].items()},
            name=graph["name"],
            gradient=[ndb.GradientItem(**g) for g in graph.get("gradient", [])],
        )
        assert json.loads(ndb.ModelNodeData(graphsData={gid: rebuilt}).to_json_string()) == data
    flops = json.loads(files["flops"].read_text())[gid]["results"]
    nbytes = json.loads(files["output_bytes"].read_text())[gid]["results"]
    params = json.loads(files["parameters"].read_text())[gid]["results"]
    claims = json.loads(files["claim_state"].read_text())[gid]["results"]
    for op in gpt2_trace.ops:
        assert flops[op.label]["value"] == op_flops(op, gpt2_trace)
        assert nbytes[op.label]["value"] == op_output_bytes(op)
        assert claims[op.label] == {"value": "OBSERVED", "bgColor": me.CLAIM_COLORS["OBSERVED"]}
    c_attn = next(op for op in gpt2_trace.ops if op.module == "transformer.h.0.attn.c_attn" and op.kind == "addmm")
    assert params[c_attn.label]["value"] == 32 * 96 + 96
    lm_head = next(op for op in gpt2_trace.ops if op.module == "lm_head")
    assert params[lm_head.label]["value"] == 100 * 32  # tied to wte, still read by lm_head
    assert sum(r["value"] for r in flops.values()) > 0


def test_node_data_refuses_unknown_metric(gpt2_trace):
    with pytest.raises(ValueError):
        me.node_data(gpt2_trace, "latency")


# -- ladder state on a weights-free export --------------------------------------------------------
def test_structure_only_export_shows_hypothesis():
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)).eval()
    ids = torch.randint(0, 100, (1, 8)).to("meta")
    trace = tracer.trace(model, (ids,), capture=tracer.CaptureOptions(structure_only=True))
    assert trace.ladder_state == "HYPOTHESIS"
    payload = me.to_graph_collection(trace)
    me.validate_payload(payload)
    graph = payload["graphs"][0]
    assert "HYPOTHESIS" in payload["label"] and "HYPOTHESIS" in graph["id"]
    assert graph["groupNodeAttributes"][""]["structure_only"] == "true"
    states = {kv["value"] for n in graph["nodes"] for kv in n["attrs"] if kv["key"] == "claim_state"}
    assert states == {"HYPOTHESIS"}
    overlay = me.node_data(trace, "claim_state")[graph["id"]]
    assert {r["bgColor"] for r in overlay["results"].values()} == {me.CLAIM_COLORS["HYPOTHESIS"]}


# -- the KV cache opens as one folded layer ---------------------------------------------------------
def test_kv_cache_outputs_share_one_layer_and_the_payload_stays_valid():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).eval()
    trace = tracer.trace(model, (torch.ones(1, 6, dtype=torch.long, device="meta"),),
                         capture=tracer.CaptureOptions(structure_only=True))
    payload = _assert_counts(trace)  # validator and the rebuild through graph_builder
    graph = payload["graphs"][0]
    cache = [op.label for op in trace.outputs if op.io_path.startswith("cache.")]
    assert len(cache) == 8  # keys and values of four layers
    namespaces = {n["id"]: n["namespace"] for n in graph["nodes"]}
    assert {namespaces[label] for label in cache} == {"cache (8 outputs)"}
    roots = [n["id"] for n in graph["nodes"] if n["namespace"] == "" and n["id"].startswith("output")]
    assert [trace[r].io_path for r in roots] == ["logits"]  # only the logits stay a root node
    group = graph["groupNodeAttributes"]["cache (8 outputs)"]
    assert group == {"module": "", "class": "model outputs", "io_path": "cache.*", "tensors": "8"}


# -- counts on real architectures -------------------------------------------------------------------
def _assert_counts(trace):
    payload = me.to_graph_collection(trace)
    report = me.validate_payload(payload)
    assert report.nodes == len(trace.ops)
    assert report.edges == trace.num_edges
    assert me.rebuild_with_graph_builder(payload) == payload
    return payload


@pytest.mark.slow
def test_resnet18_shaped_export_is_valid():
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[2, 2, 2, 2], layer_type="basic")
    trace = tracer.trace(ResNetModel(cfg).eval(), (torch.randn(1, 3, 32, 32),))
    payload = _assert_counts(trace)
    kinds = trace.kind_counts()
    assert kinds["conv2d"] == 1 + 2 * 8 + 3  # stem, two per basic block, three downsample shortcuts
    layers = payload["graphs"][0]["groupNodeAttributes"]
    assert "encoder (ResNetEncoder)/stages (ModuleList)/3 (ResNetStage)/layers (Sequential)/1 (ResNetBasicLayer)" in layers


@pytest.mark.slow
def test_gpt2_small_export_is_valid():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    trace = tracer.trace(GPT2LMHeadModel(GPT2Config()).eval(), (torch.randint(0, 50257, (1, 8)),))
    payload = _assert_counts(trace)
    groups = payload["graphs"][0]["groupNodeAttributes"]
    assert groups[""]["parameters"] == "124439808"  # GPT-2 small, tied lm_head counted once
    assert groups["transformer (GPT2Model)/h (ModuleList)/11 (GPT2Block)"]["class"] == "GPT2Block"


# -- lazy import ---------------------------------------------------------------------------------
def test_export_does_not_import_model_explorer(tmp_path):
    code = (
        "import sys, torch, tracer\n"
        "from torch import nn\n"
        "from exporters import model_explorer as me\n"
        "t = tracer.trace(nn.Sequential(nn.Linear(2, 2)), (torch.randn(1, 2),))\n"
        f"me.export(t, {str(tmp_path / 'g.json')!r}); me.export_node_data(t, {str(tmp_path / 'g.json')!r})\n"
        "me.validate_payload(me.to_graph_collection(t))\n"
        "assert 'model_explorer' not in sys.modules, 'model_explorer was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# -- names kept through Model Explorer's single-child flattening (issue 36) -------------------------
def test_modules_holding_one_op_name_their_node(gpt2_trace):
    payload = me.to_graph_collection(gpt2_trace)
    nodes = {n["id"]: n for n in payload["graphs"][0]["nodes"]}
    by_module = {gpt2_trace[i].module: n for i, n in nodes.items()}
    assert by_module["lm_head"]["label"] == "lm_head: Linear"
    assert by_module["transformer.wte"]["label"] == "wte: Embedding"
    assert by_module["transformer.wpe"]["label"] == "wpe: Embedding"
    assert by_module["transformer.h.0.ln_1"]["label"] == "ln_1: LayerNorm"
    op = by_module["lm_head"]["id"]
    assert {"key": "op", "value": op} in by_module["lm_head"]["attrs"]  # the op's label is still there
    assert me.check.layer_names_lost(payload) == []
    assert me.check.rebuild_with_graph_builder(payload) == payload  # the vendor's schema takes the labels
    for n in payload["graphs"][0]["nodes"]:  # with the op labels back, the check names what is lost
        n["label"] = n["id"]
    lost = me.check.layer_names_lost(payload)
    assert any(x.startswith("lm_head (Linear) collapses into") for x in lost), lost


def test_a_chain_of_single_child_layers_names_every_module():
    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.outer = nn.Sequential(nn.Sequential(nn.Linear(4, 4)))
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.outer(x))

    trace = tracer.trace(Wrapped().eval(), (torch.randn(2, 4),))
    payload = me.to_graph_collection(trace)
    labels = {n["id"]: n["label"] for n in payload["graphs"][0]["nodes"]}
    assert labels["linear_1"] == "outer: Sequential/0: Sequential/0: Linear"
    assert labels["relu_1"] == "act: ReLU"
    assert me.check.layer_names_lost(payload) == []
    kept = me.to_graph_collection(trace, keep_single_child_layers=True)  # the layers stay: names are theirs
    assert {n["id"]: n["label"] for n in kept["graphs"][0]["nodes"]}["linear_1"] == "linear_1"


@pytest.mark.slow
@pytest.mark.browser
def test_a_served_model_explorer_page_shows_the_module_names(gpt2_trace, tmp_path, page, artifacts_dir):
    """The real Model Explorer on the GPT-2 export: searching `lm_head` and `wte` lists the nodes by their
    module's name and class, and selecting one shows that label in its info panel."""
    path = me.export(gpt2_trace, tmp_path / "gpt2.json")
    server = me.serve(path)
    with server:
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(me.open_url(server.base_url, path))
        search = page.get_by_placeholder("Search nodes/layers by regex")
        search.wait_for(timeout=60_000)
        page.get_by_text(f"{len(gpt2_trace.ops)} nodes").first.wait_for(timeout=60_000)
        for name, label in (("lm_head", "lm_head: Linear"), ("wte", "wte: Embedding")):
            search.fill(name)
            hit = page.get_by_text(label, exact=True).filter(visible=True)
            hit.first.wait_for(timeout=30_000)
        hit.first.click(modifiers=["Alt"])
        page.wait_for_timeout(500)
        page.screenshot(path=str(Path(artifacts_dir) / "model_explorer_gpt2_names.png"))
        assert "wte: Embedding" in page.locator("body").inner_text()
