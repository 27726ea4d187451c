"""A structure-only capture inside torch.autocast records autocast's dtypes (on meta autocast casts
nothing): every op's dtype equals the real CPU capture's, discharge corroborates, and the admission
record says the dtypes were modeled. Without autocast nothing changes (and the C common case stays on)."""
from __future__ import annotations

import torch
from torch import nn

import tracer
from tracer.weights_free.guard import StructureOnlyGuard


class Mixed(nn.Module):
    """A matmul-like kernel autocast lowers, a norm and a softmax it leaves, and a loss it keeps in float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.softmax(self.norm(torch.relu(self.fc1(x))), dim=-1)
        out = self.fc2(h)
        return out, nn.functional.mse_loss(out, torch.zeros_like(out))


def _captures(model_cls=Mixed, make_inputs=lambda d: (torch.randn(3, 8, device=d),)):
    def build(device):
        torch.manual_seed(0)
        with torch.device(device):
            return model_cls().eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        meta = tracer.trace(build("meta"), make_inputs("meta"), capture=tracer.CaptureOptions(structure_only=True))
        real = tracer.trace(build("cpu"), make_inputs("cpu"))
    return meta, real


def test_weights_free_dtypes_are_autocasts():
    meta, real = _captures()
    assert [(op.kind, op.out.dtype) for op in meta.ops] == [(op.kind, op.out.dtype) for op in real.ops]
    assert {op.out.dtype for op in meta.ops if op.kind == "linear"} == {"bfloat16"}
    assert next(op for op in meta.ops if op.kind == "mse_loss").out.dtype == "float32"
    record = meta.provenance.admission["autocast"]
    assert record["device_type"] == "cpu" and record["dtype"] == "bfloat16"
    assert record["cast_outputs"] >= 2 and record["not_modeled_count"] == 0
    assert meta.discharge_against(real).state == "CORROBORATED"


def test_weights_free_gpt2_under_autocast_corroborates():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = GPT2LMHeadModel(config)

        def forward(self, ids):
            return self.lm(input_ids=ids).logits

    meta, real = _captures(Tiny, lambda d: (torch.arange(6, device=d).reshape(1, 6),))
    assert meta.discharge_against(real).state == "CORROBORATED"
    assert meta.provenance.admission["autocast"]["cast_outputs"] > 0


def test_without_autocast_nothing_is_modeled():
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Mixed().eval()
    trace = tracer.trace(model, (torch.randn(3, 8, device="meta"),), capture=tracer.CaptureOptions(structure_only=True))
    assert "autocast" not in (trace.provenance.admission or {})
    assert {op.out.dtype for op in trace.ops if op.out is not None} == {"float32"}
    assert StructureOnlyGuard(model, {}).common_case() is not None  # the C common case is kept
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert StructureOnlyGuard(model, {}).common_case() is None  # every call goes through the model
