"""register_attention: the masked text route traces weights-free on meta under sdpa or eager and discharges
CORROBORATED against the real text-route run; a real forward's numbers do not change (Llama, Qwen2, GPT-NeoX
configs, tiny sizes, random weights)."""
from __future__ import annotations

import pytest
import torch

from tests.tracer.test_hf_text import TEXT, meta_twin, tokenizer_dir  # noqa: F401  (the fixture)
from tracer import errors
from tracer.bridges.transformers import register_attention, trace_text

SDPA_ATOL = 1e-5  # registered sdpa (explicit causal mask) against plain sdpa (is_causal skip), float32 logits


def build(arch: str, attn: str):
    import transformers as tf

    torch.manual_seed(0)
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  vocab_size=100, max_position_embeddings=64, attn_implementation=attn)
    if arch == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **common)).eval()
    if arch == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=2, **common)).eval()
    return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(rotary_pct=0.5, **common)).eval()


ARCHS = ["llama", "qwen2", "gpt_neox"]
IDS = torch.tensor([[2, 3, 4, 5, 2, 6]])


def logits(model, mask=None):
    with torch.no_grad():
        return model(IDS, attention_mask=torch.ones_like(IDS) if mask is None else mask).logits


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_text_route_under_registered_attention_discharges_corroborated(arch, attn, tokenizer_dir):
    real = build(arch, attn)
    key = register_attention(real)
    assert key == f"tracer_value_free_{attn}" and real.config._attn_implementation == key
    st = trace_text(meta_twin(real), TEXT, tokenizer=tokenizer_dir)
    assert st.structure_only and st.values == {} and st.envelope.twin["attn_implementation"] == key
    rt = trace_text(real, TEXT, tokenizer=tokenizer_dir)
    result = st.discharge_against(rt)
    assert result.state == "CORROBORATED" and len(st) == len(rt)
    assert torch._C._len_torch_function_stack() == 0


PADDED = torch.tensor([[0, 1, 1, 1, 1, 1]])


def logits_before_and_after(arch, attn):
    """(all-ones, padded) logits of the plain model, then of the same model after register_attention."""
    model = build(arch, attn)
    before = logits(model), logits(model, PADDED)
    register_attention(model)
    return model, before, (logits(model), logits(model, PADDED))


@pytest.mark.parametrize("arch", ARCHS)
def test_registered_over_eager_is_bit_equal_to_eager(arch):
    _model, before, after = logits_before_and_after(arch, "eager")
    assert torch.equal(after[0], before[0]) and torch.equal(after[1], before[1])


@pytest.mark.parametrize("arch", ARCHS)
def test_registered_over_sdpa_is_within_the_stated_tolerance_of_sdpa(arch):
    model, before, after = logits_before_and_after(arch, "sdpa")
    assert torch.allclose(after[0], before[0], rtol=0, atol=SDPA_ATOL)
    assert torch.equal(after[1], before[1])  # a padded mask is materialised by sdpa too
    eager = build(arch, "eager")
    assert torch.allclose(logits(model), logits(eager), rtol=0, atol=SDPA_ATOL)


def test_without_registration_the_sdpa_text_route_still_refuses(tokenizer_dir):
    with pytest.raises(errors.ValueDependentBranchError):
        trace_text(meta_twin(build("qwen2", "sdpa")), TEXT, tokenizer=tokenizer_dir)


def test_register_is_idempotent_and_undone_by_setting_the_backend_back():
    model = build("llama", "sdpa")
    key = register_attention(model)
    assert register_attention(model) == key and register_attention(model, "sdpa") == key
    model.set_attn_implementation("sdpa")
    assert model.config._attn_implementation == "sdpa"


def test_unsupported_backends_and_non_transformers_models_refuse_typed():
    model = build("llama", "sdpa")
    with pytest.raises(errors.InvalidInputError) as info:
        register_attention(model, backend="flash_attention_2")
    assert info.value.findings["backend"] == "flash_attention_2" and model.config._attn_implementation == "sdpa"
    with pytest.raises(errors.InvalidInputError):
        register_attention(torch.nn.Linear(2, 2))


def test_the_sdpa_refusal_names_register_attention_as_a_remedy(tokenizer_dir):
    with pytest.raises(errors.ValueDependentBranchError) as info:
        trace_text(meta_twin(build("llama", "sdpa")), TEXT, tokenizer=tokenizer_dir)
    assert "register_attention(model)" in info.value.remedy
