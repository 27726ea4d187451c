"""tracer.compare twins on real architectures: GPT-2 small fp32 against bf16 and eager against sdpa
(random weights, no download), LoRA merged against unmerged, a second model, and typed refusals."""
from __future__ import annotations

import pytest
import torch

import tracer
from tracer.errors import CompareTwinError, CompareTwinUnavailableError, DiffInputError
from tests.models import tiny_gpt2

IDS = torch.tensor([[464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 50256, 318, 257, 1332, 286, 262]])


@pytest.fixture(scope="module")
def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(attn_implementation="eager")).eval()  # 124M, 12 blocks


@pytest.mark.slow
def test_gpt2_small_fp32_against_bf16_localizes_and_rolls_up_per_block(gpt2_small):
    before = torch.random.get_rng_state()
    d = tracer.compare(gpt2_small, (IDS,), against=torch.bfloat16)
    assert torch.equal(torch.random.get_rng_state(), before)  # the seed was set inside a fork
    assert next(gpt2_small.parameters()).dtype == torch.float32  # the model itself is untouched
    assert not d.added_ops and not d.removed_ops and not d.added_modules and not d.removed_modules
    assert d.changed_ops and all(c.dtype_only for c in d.changed_ops)  # dtype is the only structural change
    assert d.values_compared and d.tolerance.rtol == torch.finfo(torch.bfloat16).eps
    first = d.first_divergence
    assert first is not None and first.rel_l2 > d.tolerance.rtol
    rollups = d.rollups()
    blocks = [rollups[f"transformer.h.{i}"] for i in range(12)]
    assert all(b.ops_compared > 0 and b.output_rel_l2 > 0 and b.worst_op for b in blocks)
    assert blocks[-1].output_rel_l2 > blocks[0].output_rel_l2  # the error builds up through the blocks
    assert rollups["transformer.wte"].output_rel_l2 < blocks[0].output_rel_l2
    worst = max(d.divergences, key=lambda x: x.rel_l2)
    assert rollups[""].worst_op == worst.label_a and any(s.startswith("transformer.h.") for s in worst.scope)
    assert not any(r.structural for r in rollups.values())  # dtype-only changes are not structural
    text = d.to_text()
    assert "GPT2Block x12" in text and "retyped" in text


@pytest.mark.slow
def test_gpt2_eager_against_sdpa_differs_in_attention_only(gpt2_small):
    d = tracer.compare(gpt2_small, (IDS,), against="sdpa")
    assert gpt2_small.config._attn_implementation == "eager"
    assert not d.added_modules and not d.removed_modules and not d.changed_modules and not d.changed_params
    assert d.added_ops and all(any(s.endswith(".attn") for s in op.scope) for op in d.added_ops)
    assert any(op.func.endswith("scaled_dot_product_attention") for op in d.added_ops)
    assert any(op.func.endswith("softmax") for op in d.removed_ops)
    for op in d.removed_ops:  # attention math, or the 4-D mask eager builds in the model body
        assert any(s.endswith(".attn") for s in op.scope) or op.module == "transformer", op
    assert all(any(s.endswith(".attn") for s in c.scope) for c in d.changed_ops)
    touched = {s for rec in (*d.added_ops, *d.removed_ops, *d.changed_ops) for s in rec.scope}
    for address in ("transformer.wte", "transformer.ln_f", "lm_head", *(f"transformer.h.{i}.mlp" for i in range(12))):
        assert address not in touched
    assert d.first_divergence is None  # the two backends agree within the default tolerance
    assert max(x.rel_l2 for x in d.divergences) < 1e-5


def test_lora_merged_against_unmerged_changes_the_adapted_layers_only():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_gpt2(), LoraConfig(r=4, target_modules=["c_attn"], init_lora_weights=False,
                                                   fan_in_fan_out=True))
    d = tracer.compare(model, (IDS[:, :8] % 100,), against="lora-merged")
    touched = {op.module for op in (*d.added_ops, *d.removed_ops)} | {c.module for c in d.changed_ops}
    assert touched and all(".attn.c_attn" in m for m in touched)
    assert d.first_divergence is None  # merging is exact within the default tolerance
    assert any(m.endswith("c_attn.lora_A") for m in d.removed_modules)
    assert hasattr(model, "merge_and_unload") and model.peft_config  # the adapters are still on the model


def test_second_model_twin():
    d = tracer.compare(tiny_gpt2(2), (IDS[:, :8] % 100,), against=tiny_gpt2(3))
    assert {m for m in d.added_modules if m.count(".") == 2} == {"transformer.h.2"}
    assert "second model" in d.b.description


def test_bitsandbytes_int8_twin_changes_only_the_quantized_layers():
    pytest.importorskip("bitsandbytes")
    model = tiny_gpt2()
    before = {n: p.detach().clone() for n, p in model.state_dict().items()}
    d = tracer.compare(model, (IDS[:, :8] % 100,), against="int8")
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())  # the model itself is untouched
    assert "LLM.int8()" in d.b.description
    # Only the linear layers (Conv1D in GPT-2) change what runs inside them; every module still matches.
    assert not d.added_modules and not d.removed_modules
    changed = {op.module.rsplit(".", 1)[-1] for op in (*d.added_ops, *d.removed_ops)}
    assert changed and changed <= {"c_attn", "c_proj", "c_fc"}
    first = d.first_divergence
    assert first is not None and first.module.startswith("transformer.h.0")  # from the first quantized layer on
    assert all(p.grad is None for p in model.parameters())


def test_refusals_are_typed():
    model = tiny_gpt2()
    with pytest.raises(CompareTwinUnavailableError) as err:
        tracer.compare(torch.nn.Sequential(torch.nn.ReLU()), (torch.zeros(1, 2),), against="int8")
    assert err.value.code == "compare_twin_unavailable"
    with pytest.raises(CompareTwinError):
        tracer.compare(model, (IDS[:, :8] % 100,), against=42)
    with pytest.raises(CompareTwinError):
        tracer.compare(torch.nn.Linear(2, 2), (torch.zeros(1, 2),), against="sdpa")
    with pytest.raises(CompareTwinError):
        tracer.compare(model, (IDS[:, :8] % 100,), against="lora-merged")
    with pytest.raises(CompareTwinError):
        tracer.compare(model, (IDS[:, :8] % 100,), against=torch.int8)
    with pytest.raises(DiffInputError):
        tracer.compare("model", (), against="bf16")
