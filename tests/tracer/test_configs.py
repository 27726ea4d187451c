"""The shipped configs: each builds on meta and declares exactly the public parameter count.

Configs are read from this checkout's `static/configs/` by path (an editable install may map
`tracer.configs` to another checkout); `shipped_configs()` must list a subset of them.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tracer
from tracer import errors
from tracer.bridges.transformers import build_meta_model, load_config, shipped_configs, trace_config

CONFIGS = Path(__file__).resolve().parents[2] / "static" / "configs"
# Declared parameters (tied counted once), from /work/shared/reference/configs.md; the sliding-window
# families' counts were measured on meta (sum of parameter numel) from their public config values.
EXPECTED = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-405b": 405_853_388_800,
    "qwen2.5-0.5b": 494_032_768,
    "mixtral-8x7b": 46_702_792_704,
    "gpt2": 124_439_808,
    "bert-base": 109_482_240,
    "mistral-7b": 7_241_732_096,
    "gemma-2-9b": 9_241_705_984,
    "gemma-3-1b": 999_885_952,
    "phi-3-mini-4k": 3_821_079_552,
    "qwen2-7b": 7_615_616_512,
}
# Families whose cache makes a sliding-window constant (`torch.tensor(sliding_window)`) in the forward.
SLIDING = ("mistral-7b", "gemma-2-9b", "gemma-3-1b", "phi-3-mini-4k", "qwen2-7b")
# The shrunken same-family twin each is discharged against: public field names, small values.
# Qwen2-7B's public config has use_sliding_window=false; the twin turns it on to exercise the window.
SHRINK = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "head_dim": 16,
          "vocab_size": 128, "max_position_embeddings": 64, "sliding_window": 4, "query_pre_attn_scalar": 16}
SHRINK_PER_FAMILY = {
    "mistral-7b": {"num_hidden_layers": 2, "num_key_value_heads": 2},
    "gemma-2-9b": {"num_hidden_layers": 2, "num_key_value_heads": 2},
    "gemma-3-1b": {"num_hidden_layers": 6, "num_key_value_heads": 1},  # five sliding layers, one full
    "phi-3-mini-4k": {"num_hidden_layers": 2, "num_key_value_heads": 4, "original_max_position_embeddings": 64,
                      "eos_token_id": 127, "pad_token_id": 127},
    "qwen2-7b": {"num_hidden_layers": 2, "num_key_value_heads": 2, "use_sliding_window": True,
                 "max_window_layers": 1},
}


def config_path(name: str) -> Path:
    return CONFIGS / f"{name}.json"


def test_every_expected_config_is_shipped_and_small():
    assert {p.stem for p in CONFIGS.glob("*.json")} == set(EXPECTED)
    assert set(shipped_configs()) <= set(EXPECTED)
    for name in EXPECTED:
        path = config_path(name)
        data = json.loads(path.read_text())
        assert data["model_type"] and data["architectures"] and path.stat().st_size < 1024


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_declares_exact_parameter_count(name):
    model = build_meta_model(load_config(config_path(name)))
    assert all(p.is_meta for p in model.parameters()) and not model.training
    assert sum(p.numel() for p in model.parameters()) == EXPECTED[name]
    assert type(model).__name__ == load_config(config_path(name)).architectures[0]


def shrunken(name: str):
    """The same family's config with small public fields (see SHRINK)."""
    from transformers import AutoConfig

    data = json.loads(config_path(name).read_text())
    data.update(SHRINK, **SHRINK_PER_FAMILY[name])
    return AutoConfig.for_model(data.pop("model_type"), **data)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLIDING)
def test_sliding_window_family_captures_weights_free_and_discharges_corroborated(name):
    full = trace_config(config_path(name), input_shape=(1, 8))
    assert full.ladder_state == "HYPOTHESIS" and full.param_count() == EXPECTED[name] and full.values == {}
    constants = full.provenance["admission"]["constants"]
    if load_config(config_path(name)).sliding_window is not None:  # the window constant is recorded, not refused
        assert constants and all(c["call"] == "torch.tensor" and c["shape"] == [] for c in constants)
    config = shrunken(name)
    meta = build_meta_model(config)
    torch.manual_seed(0)
    real = type(meta)._from_config(config).eval()
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    structure = tracer.trace(meta, (ids.to("meta"),), capture=tracer.CaptureOptions(structure_only=True))
    assert structure.provenance["admission"]["constants"], "the shrunken twin makes the window constant too"
    observed = tracer.trace(real, (ids,))
    result = structure.discharge_against(observed)
    assert result.state == "CORROBORATED" and result.contradiction is None, str(result)


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
