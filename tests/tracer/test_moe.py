"""[issue 7] MoE router logits: tiny Mixtral, Qwen2-MoE and OLMoE (2 layers, 4 experts, top-2).

transformers 5 fuses each layer's experts into one module with 3-D `gate_up_proj` and
`down_proj` parameters; the trace must return the model's exact output, expose every
per-layer router-logit tensor as an output op, attribute the fused expert weights, and
pass forward validation, under eager and sdpa attention.
"""
from __future__ import annotations

import pytest
import torch

import tracer

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])
FAMILIES = ("mixtral", "qwen2_moe", "olmoe")


def tiny_moe(family: str, attn: str):
    """A two-layer, four-expert, top-2 MoE causal LM with random weights (seeded)."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, attn_implementation=attn,
                  output_router_logits=True, num_experts_per_tok=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if family == "mixtral":
        return tf.MixtralForCausalLM(tf.MixtralConfig(num_local_experts=4, **common)).eval()
    if family == "qwen2_moe":
        # use_sliding_window=False makes transformers 5.24 build an unused sliding mask with window 0
        # (every position masked), whose `where` edge truly carries no data; a window shorter than the prompt avoids that.
        cfg = tf.Qwen2MoeConfig(num_experts=4, moe_intermediate_size=48, shared_expert_intermediate_size=64,
                                decoder_sparse_step=1, use_sliding_window=True, sliding_window=4,
                                max_window_layers=0, **common)
        return tf.Qwen2MoeForCausalLM(cfg).eval()
    return tf.OlmoeForCausalLM(tf.OlmoeConfig(num_experts=4, **common)).eval()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_router_logits_are_exact_outputs_and_experts_are_attributed(family, attn):
    model = tiny_moe(family, attn)
    direct = model(IDS)
    t = tracer.trace(model, (IDS,))
    # the exact model output: logits and every per-layer router-logit tensor, bit-equal
    assert torch.equal(t.output.logits, direct.logits)
    assert len(direct.router_logits) == 2 and len(t.output.router_logits) == 2
    for got, want in zip(t.output.router_logits, direct.router_logits):
        assert got.shape == (IDS.numel(), 4) and torch.equal(got, want)
    # each router-logit tensor is an output op of the trace, fed by the op that made it
    outputs = {op.io_path: op for op in t.outputs}
    for layer in range(2):
        op = outputs[f"router_logits.{layer}"]
        assert op.out.shape == (IDS.numel(), 4)
        assert torch.equal(t.values[op.parents[0].source], direct.router_logits[layer])
        # traced back through the graph, it comes from this layer's router (`mlp.gate`)
        router = f"model.layers.{layer}.mlp.gate"
        assert any(t[a].module == router for a in _ancestors(t, op.label)), router
    # the fused expert weights are parameter records, 3-D, and consumed by ops in the experts module
    consumed = {addr: op for op in t.ops for addr in op.params}
    for layer in range(2):
        for name in ("gate_up_proj", "down_proj"):
            addr = f"model.layers.{layer}.mlp.experts.{name}"
            assert len(t.params[addr].shape) == 3 and t.params[addr].shape[0] == 4
            assert addr in consumed, f"{addr} is not attributed to any op"
            assert consumed[addr].module == f"model.layers.{layer}.mlp.experts"
    # forward validation: every op replays bit-exact, every edge carries data (or is excused by the table)
    assert (report := tracer.validate(t)), report.to_dict()["findings"][:3]
    report = report.to_dict()
    assert report["ops_replayed"] > 100 and report["edges_carrying"] > 100
    # excuses: empty KV-cache parents, and the one kernel-table entry MoE needs (the inverse
    # permutation written into empty_like memory by `inv_perm[perm] = arange(...)`)
    writes = [(label, pos) for label, pos, why in report["excused"] if label.startswith("setitem_")]
    assert writes == [("setitem_1", "0"), ("setitem_2", "0")]
    assert all(t[label].parents[0].source.startswith("empty_like_") for label, _p in writes)
    assert all(why.startswith(("declared", "the parent is empty")) for _l, _p, why in report["excused"])


def _ancestors(t, label: str) -> set[str]:
    seen, todo = set(), [label]
    while todo:
        for edge in t[todo.pop()].parents:
            if edge.source not in seen:
                seen.add(edge.source)
                todo.append(edge.source)
    return seen


def test_doctor_moe_row_names_the_tested_families():
    from tracer.compat.doctor import doctor

    for family in FAMILIES:
        row = doctor(tiny_moe(family, "sdpa")).row("moe.router_logits")
        assert row.status == "pass" and any("test_moe.py::test_router_logits" in t for t in row.tests)
    from tests.models import tiny_llama

    assert "moe.router_logits" not in doctor(tiny_llama()).keys()
