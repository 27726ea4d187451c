"""[issue 16] What the explorer and the exports show of a sharded trace, without a browser (one process).

A tiny Llama config simulated at tp 2 (fake backend): the "comm_bytes" overlay holds each collective's
wire bytes and rolls them up per module; Model Explorer nodes carry placement, shapes, mesh and the
collective; node data exports the overlay. The same trace merged as two ranks (`merge_ranks`, what
`gather` does on rank 0) gives the selector's views, collective node styling and inspector rows.
"""
from __future__ import annotations

import json

import pytest

import tracer.distributed as td
from tracer.distributed.gather import merge_ranks

TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 128, "max_position_embeddings": 64, "torch_dtype": "float32"}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.json"
    path.write_text(json.dumps(TINY))
    return td.simulate(path, tp=2)


def test_comm_overlay_and_model_explorer_attrs(simulated):
    from exporters import overlays
    from exporters.model_explorer.payload import node_data, to_graph_collection

    colls = [op for op in simulated.ops if op.collective is not None]
    assert len(colls) == 4 and "comm_bytes" in overlays.available(simulated)
    ov = overlays.build_overlay(simulated, "comm_bytes")
    assert ov.ops == {op.label: op.collective.wire_bytes for op in colls} and ov.title.endswith("(estimates)")
    # (1, 8, 64) float32 all-reduced over 2 ranks: 2 (n - 1) / n x 2048 bytes each
    assert set(ov.ops.values()) == {2048}
    per_layer = {}
    for op in colls:
        layer = ".".join(op.module.split(".")[:3])
        per_layer[layer] = per_layer.get(layer, 0) + ov.ops[op.label]
    assert per_layer == {"model.layers.0": 4096, "model.layers.1": 4096}
    nodes = {n["id"]: {a["key"]: a["value"] for a in n["attrs"]}
             for g in to_graph_collection(simulated)["graphs"] for n in g["nodes"]}
    q = next(op for op in simulated.ops if op.layout is not None and op.module.endswith("q_proj"))
    assert nodes[q.label]["placement"] == "Shard(2)"  # the tp sub-mesh is 1-D: one placement
    assert nodes[q.label]["global_shape"] == "[1, 8, 64]" and nodes[q.label]["local_shape"] == "[1, 8, 32]"
    c = nodes[colls[0].label]
    assert c["collective"] == "all_reduce (funcol) over ranks [0, 1]" and c["wire_bytes"] == "2048 (estimate)"
    data = node_data(simulated, "comm_bytes")
    assert {k: v["value"] for k, v in next(iter(data.values()))["results"].items()} == ov.ops


def test_rank_views_styling_and_inspector_rows_of_a_merged_trace(simulated):
    from app.views import ranks
    from exporters.bokeh_graph import figure_data
    from exporters.layout import LayoutEngine

    from tracer.store.codec import decode_body, encode_body

    body = decode_body(encode_body(simulated), site="test")  # what each rank sends to gather()
    merged = merge_ranks([(0, body), (1, body)])
    views = ranks.rank_views(merged)
    assert list(views) == ["all 2 ranks", "folded: x 2 ranks", "rank 0", "rank 1"]
    assert {op.rank for op in views["rank 1"].ops} == {1} and len(views["rank 1"].ops) == len(simulated.ops)
    assert {op.rank for op in views["folded: x 2 ranks"].ops} == {0}
    lm_head = views["rank 1"].modules["lm_head"].calls[0]  # its call record names rank 1's own ops
    assert lm_head.outputs and all(x.startswith("r1.") and x in views["rank 1"] for x in lm_head.outputs)
    coll = merged["r0.collective_1"]
    assert any(e.position == "rank1.0" for e in coll.parents)  # joined to the peer's input
    engine = LayoutEngine(merged)
    nodes = figure_data(engine.layout(frozenset(merged.modules)), merged)["nodes"]
    ranks.decorate_nodes(nodes, merged)
    row = {i: (f, w, p) for i, f, w, p in zip(nodes["id"], nodes["fill"], nodes["line_w"], nodes["placement"])}
    assert row["r1.collective_1"][:2] == (ranks.COLLECTIVE_FILL, ranks.COLLECTIVE_LINE_WIDTH)
    assert "all_reduce over ranks [0, 1]" in row["r1.collective_1"][2]
    q = next(op.label for op in merged.ops if op.layout is not None and op.module.endswith("q_proj"))
    assert row[q][1] == 1.0 and row[q][2].startswith("Shard(2) of 1×8×64")
    fields = dict(ranks.inspector_rows(merged, q))
    assert fields["placement"] == "Shard(2)" and fields["local shape"] == "(1, 8, 32)" and fields["rank"] == "0"
    assert "Shard(2)" in ranks.inspector_markup(merged, q)["placement"]
    assert ranks.rank_views(simulated) == {"x 2 ranks (simulated, rank 0 captured)": simulated}
