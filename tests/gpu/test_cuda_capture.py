"""Capture and validation on a CUDA device: skipped where torch sees no GPU.

On a machine with a GPU: `pytest tests/gpu -q`. GPU kernels are where replay is least likely to be
bit for bit (cuBLAS/cuDNN algorithm choice, atomics), so these check that validation holds each op
exactly or to its disclosed replay spread, never a false alarm, and that capture changes nothing.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2, tiny_llama

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


@pytest.mark.parametrize("build", [tiny_gpt2, lambda: tiny_llama(attn="sdpa"), lambda: tiny_llama(attn="eager")],
                         ids=["gpt2", "llama-sdpa", "llama-eager"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_capture_is_bit_equal_and_validates_on_cuda(build, dtype):
    model = build().to("cuda", dtype)
    ids = IDS.to("cuda")
    with torch.no_grad():
        plain = model(ids).logits
    t = tracer.trace(model, (ids,), capture=tracer.CaptureOptions(inference_only=True))
    assert torch.equal(t.output.logits, plain)
    assert all(op.out is None or op.out.device.startswith("cuda") for op in t.ops if op.kind not in ("input",))
    report = tracer.validate(t)
    assert report.passed, report.to_text()[:2000]


def test_train_mode_batchnorm_and_an_lstm_validate_on_cuda():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).to("cuda").train()
    t = tracer.trace(model, (torch.randn(5, 4, device="cuda"),))
    assert tracer.validate(t).passed
    lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True).to("cuda").eval()
    x = torch.randn(2, 5, 8, device="cuda")
    with torch.no_grad():
        plain = lstm(x)[0]
    t = tracer.trace(lstm, (x,), capture=tracer.CaptureOptions(inference_only=True))
    assert torch.equal(t.output[0], plain)
    report = tracer.validate(t)
    assert report.passed, report.to_text()[:2000]
