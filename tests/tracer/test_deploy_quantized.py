"""bitsandbytes 8-bit/4-bit layers and PEFT LoRA on the real libraries."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2
from tracer.bridges.bitsandbytes import QuantizedStateWarning
from tracer.errors import TraceInvariantError
from tracer.replay.validate import validate, validation_report

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


def _quantized(bits: int) -> nn.Module:
    bnb = pytest.importorskip("bitsandbytes")
    torch.manual_seed(0)
    dense = [nn.Linear(64, 64), nn.Linear(64, 32)]
    if bits == 8:
        layers = [bnb.nn.Linear8bitLt(d.in_features, d.out_features, has_fp16_weights=False) for d in dense]
    else:
        layers = [bnb.nn.Linear4bit(d.in_features, d.out_features, compute_dtype=torch.float32) for d in dense]
    for q, d in zip(layers, dense):
        q.load_state_dict(d.state_dict())
    return nn.Sequential(layers[0], nn.GELU(), layers[1]).to("cpu").eval()


def _capture(model: nn.Module, x: torch.Tensor):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # inference_only: once bitsandbytes repacks 4-bit weights for CPU it adds the bias in place,
        # which autograd refuses on the bare forward too when grad is enabled.
        t = tracer.trace(model, (x,), capture=tracer.CaptureOptions(inference_only=True))
    return t, [w for w in caught if issubclass(w.category, QuantizedStateWarning)]


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_capture_discloses_state_reads_in_one_warning(bits):
    model = _quantized(bits)
    x = torch.randn(3, 64)
    with torch.no_grad():
        ref = model(x)
    t, caught = _capture(model, x)
    assert torch.equal(t.output, ref)  # outputs equal the bare forward
    assert len(caught) == 1
    q = t.provenance["quantization"]
    assert q["state_ops"] and all(t[label].kind == "constant" for label in q["state_ops"])
    assert all(label in str(caught[0].message) for label in q["state_ops"][:8])  # names the ops
    assert t.provenance["verified"] is False and t.warnings


def test_validation_refuses_8bit_on_the_parameter_invariant():
    t, _ = _capture(_quantized(8), torch.randn(3, 64))
    with pytest.raises(TraceInvariantError) as err:
        validate(t)
    assert "never attributed" in err.value.message and ".weight" in err.value.message


def test_validation_returns_false_for_4bit():
    t, _ = _capture(_quantized(4), torch.randn(3, 64))
    report = validation_report(t)
    assert not validate(t)
    checks = {f.check for f in report.findings}
    assert "verification" in checks  # never passed as if dense, whatever the replay finds
    state = [f for f in report.findings if f.check == "verification"][0]
    assert state.label in t.provenance["quantization"]["state_ops"]
    assert report.first_failing_op is not None and report.first_failing_op in t


def test_peft_lora_parity_hierarchy_attribution_and_validation():
    peft = pytest.importorskip("peft")
    base = tiny_gpt2()
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True, lora_dropout=0.0,
                          init_lora_weights=False)
    model = peft.get_peft_model(base, cfg).eval()
    with torch.no_grad():
        ref = model(IDS).logits
    t = tracer.trace(model, (IDS,))
    assert torch.equal(t.output.logits, ref)
    lora_a = "base_model.model.transformer.h.0.attn.c_attn.lora_A.default"
    assert lora_a in t.modules and t.modules[lora_a].class_name == "Linear"
    assert lora_a in t.modules["base_model.model.transformer.h.0.attn.c_attn.lora_A"].children
    lora_params = {a for a in t.params if "lora_" in a}
    assert len(lora_params) == 4  # A and B in two layers
    consumed = {a for op in t.ops for a in op.params}
    assert lora_params <= consumed  # attributed at their own addresses
    assert any(op.module == lora_a and f"{lora_a}.weight" in op.params for op in t.ops)
    assert validate(t), validation_report(t).to_text()
    from tracer.bridges.peft import adapter_info

    info = adapter_info(model)
    assert info["types"] == ["LORA"] and set(info["adapter_params"]) == lora_params
