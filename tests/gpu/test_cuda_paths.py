"""The paths besides plain capture on a CUDA device: fused fast paths, the backward and its training
memory, the simulated cuda device against a real one, twins, and a saved trace. Skipped without a GPU.

Each check is a function of the device: `test_cuda_paths_on_cpu.py` runs the same bodies on the cpu, so
CI (no GPU) keeps them working code; on a machine with a GPU: `pytest tests/gpu -q`.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2, tiny_qwen3_moe
from tracer.backward.memory import training_memory
from tracer.options import CaptureOptions

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


def _check_fast_paths(device: str) -> None:
    """TransformerEncoder and MultiheadAttention in eval without grad: the fused kernels, bit-equal, validated."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(device).eval()
    mha = nn.MultiheadAttention(32, 4, batch_first=True).to(device).eval()
    x = torch.randn(2, 5, 32, device=device)
    with torch.no_grad():
        plain = enc(x)
        t = tracer.trace(enc, (x,))
        plain_mha = mha(x, x, x, need_weights=False)[0]
        tm = tracer.trace(mha, (x, x, x), {"need_weights": False})
    assert torch.equal(t.output, plain) and not t.provenance.fast_paths
    assert [op.module_stack[-1][0] for op in t.ops if op.func == "torch._transformer_encoder_layer_fwd"] == \
        ["layers.0", "layers.1"]
    assert torch.equal(tm.output[0], plain_mha)
    for trace in (t, tm):
        report = tracer.validate(trace)
        assert report.passed, report.to_text()[:2000]


def _llama(device: str, attn: str = "eager"):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, attn_implementation=attn)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    ids = torch.arange(16, device=device).reshape(1, 16) % 128
    return model.train(), (ids,), {"attention_mask": torch.ones(1, 16, dtype=torch.long, device=device)}


def _check_backward(device: str) -> None:
    """A training step: `.grad` bit-equal to the plain step; the saved bytes per module equal the
    weights-free estimate of the same config (eager attention, where both save the same tensors)."""
    loss = lambda o: o.logits.sum()  # noqa: E731
    model, args, kwargs = _llama(device)
    loss(model(*args, **kwargs)).backward()
    plain = {n: p.grad.clone() for n, p in model.named_parameters()}
    captured, args, kwargs = _llama(device)
    real = tracer.trace(captured, args, kwargs, capture=CaptureOptions(backward=True), loss=loss)
    for name, p in captured.named_parameters():
        assert torch.equal(p.grad, plain[name]), name
    meta, margs, mkwargs = _llama("meta")
    est = tracer.trace(meta, margs, mkwargs, capture=CaptureOptions(structure_only=True, backward=True), loss=loss)
    assert est.backward.estimate and not real.backward.estimate
    a, b = training_memory(real), training_memory(est)
    assert [(r.module, r.saved_bytes, r.param_bytes) for r in a.rows] == \
        [(r.module, r.saved_bytes, r.param_bytes) for r in b.rows]
    assert [n.op for n in real.backward.nodes] == [n.op for n in est.backward.nodes]




def _check_simulated_device(device: str) -> None:
    """A weights-free capture simulating `device` corroborates a real capture on it: a Qwen3-MoE (whose
    expert loop asks the runtime on cuda) and a Llama with sdpa attention."""
    ids = torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    structure = CaptureOptions(structure_only=True, simulate_device=device)
    for build in (tiny_qwen3_moe, lambda d: _llama(d, "sdpa")[0].eval()):
        real = tracer.trace(build(device), (), {"input_ids": ids.to(device)})
        meta = tracer.trace(build("meta"), (), {"input_ids": ids.to("meta")}, capture=structure)
        assert meta.discharge_against(real).state == "CORROBORATED"


def _check_twin_and_store(device: str, folder) -> None:
    """fp32 against bf16 on the device (dtype-only changes, the model untouched); a saved trace loads
    with every value bit-equal and validates offline from its file alone."""
    model = tiny_gpt2().to(device)
    ids = IDS.to(device)
    d = tracer.compare(model, (ids,), against=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.float32
    assert not d.added_ops and not d.removed_ops and d.changed_ops and all(c.dtype_only for c in d.changed_ops)
    assert d.first_divergence is not None
    t = tracer.trace(model, (ids,), capture=CaptureOptions(inference_only=True))
    t.save(folder)
    back = tracer.load(folder)
    assert set(back.values) == set(t.values)
    assert all(torch.equal(back.values[k].cpu(), v.cpu()) for k, v in t.values.items())
    assert [op.out.device if op.out is not None else None for op in back.ops] == \
        [op.out.device if op.out is not None else None for op in t.ops]


def test_fused_fast_paths_on_cuda():
    _check_fast_paths("cuda")


def test_backward_on_cuda_is_bit_equal_and_its_saved_bytes_equal_the_weights_free_estimate():
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        _check_backward("cuda")
    finally:
        torch.use_deterministic_algorithms(False)


def test_a_simulated_cuda_capture_corroborates_a_real_cuda_capture():
    _check_simulated_device("cuda")


def test_bf16_twin_and_a_saved_trace_on_cuda(tmp_path):
    _check_twin_and_store("cuda", tmp_path / "t")
