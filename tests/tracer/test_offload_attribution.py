"""Offload attribution true to the plain twin (issue #35 deliver 4), on the real accelerate and a tiny GPT-2.

accelerate's cpu_offload and disk_offload split a tied parameter (GPT-2's `lm_head.weight` is
`transformer.wte.weight`) into one meta tensor per module, and wrap every forward in their hook's
`new_forward`. The capture maps each split tied weight back to its first address and skips the hook's
frames, so parameters, op attributions and op sources are the plain capture's.
"""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_gpt2

accelerate = pytest.importorskip("accelerate")
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


@pytest.fixture(scope="module")
def twin():
    return tracer.trace(tiny_gpt2(), (IDS,))


def _offloaded(kind: str, folder) -> torch.nn.Module:
    if kind == "cpu":
        return accelerate.cpu_offload(tiny_gpt2(), execution_device="cpu")
    return accelerate.disk_offload(tiny_gpt2(), str(folder), execution_device="cpu")


def _numel(t) -> int:
    return sum(torch.Size(rec.shape).numel() for rec in t.params.values())


@pytest.mark.parametrize("kind", ["cpu", "disk"])
def test_tied_weights_under_offload_count_and_attribute_as_in_the_plain_twin(kind, twin, tmp_path):
    model = _offloaded(kind, tmp_path)
    assert model.lm_head.weight is not model.transformer.wte.weight  # offload split the tie
    t = tracer.trace(model, (IDS,))
    assert list(t.params) == list(twin.params)
    assert {a: r.tied for a, r in t.params.items()} == {a: r.tied for a, r in twin.params.items()}
    assert _numel(t) == _numel(twin)
    assert [op.params for op in t.ops] == [op.params for op in twin.ops]
    retied = t.provenance["offload"]["retied"]
    assert retied["transformer.wte.weight"]["tied"] == ["lm_head.weight"]
    assert retied["transformer.wte.weight"]["evidence"] == (
        "one storage in the offload store" if kind == "cpu" else "declared by the model (all_tied_weights_keys)")
    assert tracer.validate(t).passed


@pytest.mark.parametrize("kind", ["cpu", "disk"])
def test_op_sources_under_offload_point_at_the_model_code_not_the_hook(kind, twin, tmp_path):
    t = tracer.trace(_offloaded(kind, tmp_path), (IDS,))
    sources = [str(op.source) if op.source else None for op in t.ops]
    assert not any(s and "accelerate" in s for s in sources)
    assert sources == [str(op.source) if op.source else None for op in twin.ops]


def test_an_untied_model_under_offload_is_not_retied(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=1, n_head=2, tie_word_embeddings=False)
    plain = GPT2LMHeadModel(config).eval()
    twin = tracer.trace(plain, (IDS,))
    t = tracer.trace(accelerate.cpu_offload(plain, execution_device="cpu"), (IDS,))
    assert "lm_head.weight" in t.params and not t.params["transformer.wte.weight"].tied
    assert list(t.params) == list(twin.params)
    assert "retied" not in t.provenance["offload"]
