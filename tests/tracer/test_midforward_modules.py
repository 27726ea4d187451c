"""Modules made during the forward join the tree; in-place writes given by keyword (nn.init) are saved."""
from __future__ import annotations

import torch
from torch import nn

import tracer
from tracer.replay.validate import validation_report


class _SwapsItsChild(nn.Module):
    """Replaces a child on its first call, as BigBird swaps its attention module (the Linear is re-parented)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4))

    def forward(self, x):
        if isinstance(self.inner, nn.Sequential):
            fresh = nn.Sequential(self.inner[0], nn.ReLU())  # a module (and its ReLU) made mid-forward
            self.inner = fresh
        return self.inner(x) * 2


def test_a_module_swapped_in_mid_forward_joins_the_tree_and_survives_save_and_load(tmp_path):
    model = _SwapsItsChild()
    t = tracer.trace(model, (torch.randn(2, 4),))
    assert "inner" in t.modules[""].children
    inner = t.modules["inner"]
    assert set(inner.children) == {"inner.0", "inner.1"} and len(inner.calls) == 1
    assert any(op.kind == "relu" and op.module_address == "inner.1" for op in t.ops)
    assert validation_report(t).passed
    t.save(tmp_path / "t")
    loaded = tracer.load(tmp_path / "t")  # refused (trace_structure_invalid) when a module is unreachable
    assert set(loaded.modules["inner"].children) == {"inner.0", "inner.1"}
    assert not model._forward_hooks and not model.inner._forward_pre_hooks and not model.inner[1]._forward_hooks
    assert not nn.modules.module._global_forward_pre_hooks


class _InitsAWeight(nn.Module):
    def forward(self, x):
        w = nn.Parameter(torch.empty(4, 4))  # as a module built inside the forward does
        nn.init.uniform_(w)  # torch passes the target by keyword (tensor=w) to the function mode
        return x @ w


def test_an_in_place_init_on_a_fresh_empty_is_saved_and_validates():
    t = tracer.trace(_InitsAWeight(), (torch.randn(2, 4),))
    assert "empty_1" in t.values and "uniform__1" in t.values
    report = validation_report(t)
    assert report.passed, report.findings[:2]


def test_tiny_bigbird_validates_and_reloads(tmp_path):
    import transformers as tf

    cfg = tf.BigBirdConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=64, block_size=2, num_random_blocks=1)
    torch.manual_seed(0)
    model = tf.BigBirdModel(cfg).eval()
    t = tracer.trace(model, (torch.randint(3, 64, (1, 8)),))  # 8 tokens: BigBird swaps in full attention
    assert t.modules["encoder.layer.0.attention.self"].class_name == "BigBirdSelfAttention"
    assert validation_report(t).passed
    t.save(tmp_path / "t")
    assert tracer.validate(tracer.load(tmp_path / "t"), params=model).passed
