"""[issue 16] Weights-free sharded structure on a simulated mesh (torch's fake backend, one process).

A tiny Llama config (2 layers, hidden 64, 4 heads, 2 key/value heads, vocabulary 128, float32) is
simulated at tp 2 x fsdp 2: the sharded graph is captured structure-only (HYPOTHESIS), the
tensor-parallel all-reduces are `collective` ops marked estimated, and the per-rank parameter
bytes match the count worked out by hand below. Bad meshes refuse typed; the CLI flags reach it.
"""
from __future__ import annotations

import json

import pytest

import tracer.distributed as td
from tracer.errors import SimulatedMeshError

TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 128, "max_position_embeddings": 64, "torch_dtype": "float32"}

# Per layer after tp 2 then fsdp 2 (rows halved twice for column-wise, columns by tp and rows by fsdp for
# row-wise): q 16x64, k 8x64, v 8x64, o 32x32, gate 32x64, up 32x64, down 32x64, two norms 32 each
# = 9,280 elements; root: embedding 64x64, lm_head 64x64, norm 32 = 8,224 elements. 4 bytes each.
PER_RANK_BYTES = (2 * 9280 + 8224) * 4


@pytest.fixture
def tiny_config(tmp_path):
    path = tmp_path / "tiny-llama.json"
    path.write_text(json.dumps(TINY))
    return path


def test_tp2_fsdp2_sharded_structure_and_estimates(tiny_config):
    t = td.simulate(tiny_config, tp=2, fsdp=2)
    assert t.structure_only and t.ladder_state == "HYPOTHESIS"
    d = t.provenance.distributed
    assert d["simulated"] and d["backend"] == "fake" and d["world_size"] == 4 and (d["tp"], d["fsdp"]) == (2, 2)
    assert d["parameter_bytes_per_rank"] == PER_RANK_BYTES
    collectives = [op for op in t.ops if op.kind == "collective"]
    assert len(collectives) == 4  # o_proj and down_proj of each layer
    for op in collectives:
        c = op.collective
        assert c.name == "all_reduce" and c.estimated and c.group == (0, 1)
        assert c.payload_bytes == 1 * 8 * 64 * 4  # (batch 1, 8 tokens, hidden 64) float32
    q = next(op for op in t.ops if op.module == "model.layers.0.self_attn.q_proj")
    assert q.layout.placements == ("Shard(2)",) and q.out.shape == (1, 8, 32) and q.layout.global_shape == (1, 8, 64)
    unshard = d["fsdp_unshard"]
    assert [u["unit"] for u in unshard] == ["model.layers.0", "model.layers.1", ""]
    assert unshard[0]["payload_bytes"] == 9280 * 4 and unshard[0]["wire_bytes"] == 9280 * 4  # (fsdp - 1) x payload
    import torch.distributed as dist

    assert not dist.is_initialized()  # the simulated group is gone afterwards


def test_simulated_trace_saves_and_loads(tiny_config, tmp_path):
    import tracer

    t = td.simulate(tiny_config, tp=2)
    loaded = tracer.load(t.save(tmp_path / "sim"))
    assert [op.collective for op in loaded.ops] == [op.collective for op in t.ops]
    assert [op.layout for op in loaded.ops] == [op.layout for op in t.ops]
    assert loaded.provenance.distributed["parameter_bytes_per_rank"] == t.provenance.distributed["parameter_bytes_per_rank"]


@pytest.mark.parametrize("kwargs, site", [({"tp": 3}, "config.num_attention_heads"),
                                          ({"tp": 2, "fsdp": 2, "world_size": 8}, "world_size"),
                                          ({"tp": 0}, "tp=")])
def test_bad_meshes_refuse_typed(tiny_config, kwargs, site):
    with pytest.raises(SimulatedMeshError) as err:
        td.simulate(tiny_config, **kwargs)
    assert err.value.code == "simulated_mesh_invalid" and site in err.value.site and err.value.remedy


def test_cli_flags_simulate(tiny_config, capsys):
    from app.cli import main

    assert main(["--summary", str(tiny_config), "--tp", "2", "--fsdp", "2"]) == 0
    assert "LlamaForCausalLM" in capsys.readouterr().out


def test_plain_traces_keep_their_file_format_and_load(tmp_path):
    """A trace with no distributed fields writes none of them (files as before them) and loads with defaults."""
    import torch
    from torch import nn

    import tracer

    t = tracer.trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (torch.randn(2, 4),))
    folder = t.save(tmp_path / "plain")
    text = (folder / "trace.json").read_text() if (folder / "trace.json").exists() else ""
    assert text and '"collective"' not in text and '"rank"' not in text
    loaded = tracer.load(folder)
    assert all(op.layout is None and op.collective is None and op.rank is None for op in loaded.ops)
