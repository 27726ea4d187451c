"""Capture on real transformers architectures built from small configs with random weights."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_bert, tiny_gpt2, tiny_llama, tiny_resnet


def _all_params_consumed(t, model):
    consumed = {p for op in t for p in op.params}
    named = {name for name, _ in model.named_parameters()}
    return named - consumed


def test_gpt2_exact_output_and_attribution():
    m = tiny_gpt2(n_layer=2)
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(1))
    t = tracer.trace(m, (ids,))
    ref = m(ids)
    assert type(t.output) is type(ref)
    assert torch.equal(t.output.logits, ref.logits)
    # Conv1D in GPT-2 runs addmm with its bias and weight, inside h.<i>.attn.c_attn
    c_attn = [op for op in t if op.module == "transformer.h.1.attn.c_attn" and op.kind == "addmm"]
    assert len(c_attn) == 1
    assert set(c_attn[0].params) == {"transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_attn.bias"}
    assert c_attn[0].module_stack[0] == ("", 0)
    assert [a for a, _ in c_attn[0].module_stack] == [
        "", "transformer", "transformer.h.1", "transformer.h.1.attn", "transformer.h.1.attn.c_attn"]
    assert c_attn[0].source is not None and c_attn[0].source.file == "transformers/pytorch_utils.py"  # Conv1D.forward
    # the tied lm_head reads the embedding weight, counted once
    assert t.params["transformer.wte.weight"].tied == ("lm_head.weight",)
    assert t.param_count() == sum(p.numel() for p in m.parameters())
    assert not _all_params_consumed(t, m)
    logits_out = next(op for op in t.outputs if op.io_path == "logits")
    assert logits_out.out.shape == (1, 8, 100)
    assert t["embedding_1"].params == ("transformer.wte.weight",)


def test_llama_exact_output_and_attention_structure():
    m = tiny_llama(n_layer=2)
    ids = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(2))
    t = tracer.trace(m, (ids,), {"use_cache": False})
    assert torch.equal(t.output.logits, m(ids, use_cache=False).logits)
    for layer in (0, 1):
        mods = {op.module for op in t.ops_in(f"model.layers.{layer}")}
        assert {f"model.layers.{layer}.self_attn.q_proj", f"model.layers.{layer}.mlp.down_proj"} <= mods
    k_proj = next(op for op in t if op.module == "model.layers.0.self_attn.k_proj")
    assert k_proj.out.shape == (2, 5, 16)  # 2 kv heads x head_dim 8
    assert not _all_params_consumed(t, m)
    assert "model.rotary_emb.inv_freq" in t.params and t.params["model.rotary_emb.inv_freq"].is_buffer


def test_bert_with_dict_kwargs_inputs():
    m = tiny_bert()
    ids = torch.randint(0, 100, (1, 7), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(1, 7, dtype=torch.long)
    t = tracer.trace(m, (), {"input_ids": ids, "attention_mask": mask})
    ref = m(input_ids=ids, attention_mask=mask)
    assert torch.equal(t.output.last_hidden_state, ref.last_hidden_state)
    assert torch.equal(t.output.pooler_output, ref.pooler_output)
    assert {op.io_path for op in t.inputs} == {"kwargs.input_ids", "kwargs.attention_mask"}
    assert {op.io_path for op in t.outputs} == {"last_hidden_state", "pooler_output"}
    assert not _all_params_consumed(t, m)


def test_resnet_train_and_eval():
    m = tiny_resnet()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    t = tracer.trace(m, (x,))
    assert torch.equal(t.output.last_hidden_state, m(x).last_hidden_state)
    convs = [op for op in t if op.kind == "conv2d"]
    assert len(convs) == sum(1 for n, mod in m.named_modules() if isinstance(mod, torch.nn.Conv2d))
    assert all(op.params and op.params[0].endswith(".weight") for op in convs)
    m.train()
    state = {k: v.clone() for k, v in m.state_dict().items()}
    tt = tracer.trace(m, (x,))
    writers = {w for op in tt for w in op.buffer_writes}
    assert writers and all(w.endswith(("running_mean", "running_var", "num_batches_tracked")) for w in writers)
    changed = {k for k, v in m.state_dict().items() if not torch.equal(v, state[k])}
    assert changed == writers  # every buffer the forward changed is recorded, nothing else
    m.eval()


@pytest.mark.slow
def test_gpt2_small_default_config_counts():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.randint(0, 50257, (1, 8))
    t = tracer.trace(m, (ids,), capture=tracer.CaptureOptions(save="none"))
    assert t.param_count() == 124_439_808
    assert t.kind_counts()["layer_norm"] == 25
    assert torch.equal(t.output.logits, m(ids).logits)
