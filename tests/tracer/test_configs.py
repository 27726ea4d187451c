"""The shipped configs: each builds on meta and declares exactly the public parameter count."""
from __future__ import annotations

import json

import pytest

from tracer import errors
from tracer.bridges.transformers import build_meta_model, load_config, shipped_configs, trace_config

# Declared parameters (tied counted once), from /work/shared/reference/configs.md.
EXPECTED = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-405b": 405_853_388_800,
    "qwen2.5-0.5b": 494_032_768,
    "mixtral-8x7b": 46_702_792_704,
    "gpt2": 124_439_808,
    "bert-base": 109_482_240,
}


def test_every_expected_config_is_shipped_and_small():
    shipped = shipped_configs()
    assert set(shipped) == set(EXPECTED)
    for path in shipped.values():
        data = json.loads(path.read_text())
        assert data["model_type"] and data["architectures"] and path.stat().st_size < 1024


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_declares_exact_parameter_count(name):
    model = build_meta_model(load_config(name))
    assert all(p.is_meta for p in model.parameters()) and not model.training
    assert sum(p.numel() for p in model.parameters()) == EXPECTED[name]
    assert type(model).__name__ == load_config(name).architectures[0]


def test_llama_8b_weights_free_trace_declares_exact_geometry():
    t = trace_config("llama-3.1-8b", input_shape=(1, 8))
    assert t.param_count() == 8_030_261_248 and t.ladder_state == "HYPOTHESIS" and t.values == {}
    assert t.provenance["config_source"] == "llama-3.1-8b"
    assert t.params["model.layers.31.mlp.down_proj.weight"].shape == (4096, 14336)
    assert t.params["model.layers.0.self_attn.k_proj.weight"].shape == (1024, 4096)
    assert t.params["lm_head.weight"].dtype == "bfloat16"
    assert len(t.modules["model.layers"].children) == 32
    logits = next(op for op in t.outputs if op.io_path == "logits")
    assert logits.out.shape == (1, 8, 128256) and logits.out.device == "meta"


def test_config_from_a_path_and_refusals(tmp_path):
    src = shipped_configs()["gpt2"]
    (tmp_path / "config.json").write_text(src.read_text())
    assert load_config(tmp_path).n_layer == 12 and load_config(src).n_embd == 768
    with pytest.raises(errors.InvalidInputError) as info:
        load_config("llama-9")
    assert info.value.code == "config_not_found"
    (tmp_path / "bad.json").write_text('{"hidden_size": 3}')
    with pytest.raises(errors.InvalidInputError) as info:
        load_config(tmp_path / "bad.json")
    assert info.value.code == "config_invalid"
