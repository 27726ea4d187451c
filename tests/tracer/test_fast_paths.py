"""[issue 11] Capture never silently changes the computation: fused fast paths are captured or disclosed.

torch's TransformerEncoderLayer and MultiheadAttention run one fused kernel in a plain eval
forward without grad; a TorchFunctionMode plus hooks (how capture records) would turn it off.
Capture runs such a call as the plain forward does and records the kernel as one op; where it
cannot (the encoder's nested-tensor path, another function mode stacked above), a typed warning
says so. Wherever no warning is given, `trace.output` is bit-equal to the plain forward.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracer
from tracer.capture.fast_paths import FAST_PATH_CODE, FastPathNotTakenWarning


def _encoder() -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def _trace_quiet(model, args, **kw):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = tracer.trace(model, args, **kw)
    return t, [w for w in seen if issubclass(w.category, FastPathNotTakenWarning)]


def test_encoder_in_eval_without_grad_records_each_layer_as_its_fused_kernel_bit_equal():
    enc, x = _encoder(), torch.randn(2, 5, 32)
    hooks_before = [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in enc.modules()]
    with torch.no_grad():
        plain = enc(x)
        t, seen = _trace_quiet(enc, (x,))
    assert FastPathNotTakenWarning.code == FAST_PATH_CODE == "fast_path_not_taken"
    assert not seen and not t.provenance.fast_paths  # nothing to disclose: the trace is the plain path
    assert torch.equal(t.output, plain)
    fused = [op for op in t.ops if op.func == "torch._transformer_encoder_layer_fwd"]
    assert len(fused) == 2  # one op per layer, inside that layer
    assert [op.module_stack[-1][0] for op in fused] == ["layers.0", "layers.1"]
    assert tracer.validate(t)
    # Everything lifted for the fused call is back: the kernel, the mode stack and every module's hooks.
    assert torch._transformer_encoder_layer_fwd is torch._C._VariableFunctions._transformer_encoder_layer_fwd
    assert torch._C._len_torch_function_stack() == 0
    assert [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in enc.modules()] == hooks_before


def test_under_another_function_mode_the_fused_path_is_disclosed_not_taken():
    class Outer(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    enc, x = _encoder(), torch.randn(2, 5, 32)
    with torch.no_grad():
        t, seen = _trace_quiet(enc, (x,))
    assert not seen
    with torch.no_grad(), Outer():
        t, seen = _trace_quiet(enc, (x,))
    # The capture's mode is not the only one: lifting it would not reach the plain path, so say so.
    assert len(seen) == 2
    notes = [w for w in t.warnings if w.startswith(f"[{FAST_PATH_CODE}]")]
    for i, note in enumerate(notes):
        assert f"TransformerEncoderLayer 'layers.{i}'" in note
        assert "torch._transformer_encoder_layer_fwd" in note and "op-by-op" in note
    assert sorted(t.provenance.fast_paths) == ["layers.0", "layers.1"]
    assert t.provenance.fast_paths["layers.0"]["plain_path"].startswith("torch._transformer_encoder_layer_fwd")


@pytest.mark.parametrize("mode", ["train", "grad"])
def test_no_warning_where_the_plain_forward_takes_the_same_path_and_output_is_bit_equal(mode):
    enc, x = _encoder(), torch.randn(2, 5, 32)
    if mode == "train":
        enc.train()
        for m in enc.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0  # deterministic, still the training path
            if isinstance(m, nn.MultiheadAttention):
                m.dropout = 0.0
    plain = enc(x)  # grad enabled: the plain forward itself takes the op-by-op path
    t, seen = _trace_quiet(enc, (x,))
    assert not seen and not any(FAST_PATH_CODE in w for w in t.warnings)
    assert torch.equal(t.output, plain)


def test_multihead_attention_self_attention_is_one_fused_op_and_cross_attention_op_by_op():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x, y = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    with torch.no_grad():
        plain = mha(x, x, x)
        t, seen = _trace_quiet(mha, (x, x, x))
        plain_cross = mha(x, y, y)[0]
        t_cross, seen_cross = _trace_quiet(mha, (x, y, y))
    assert not seen and torch.equal(t.output[0], plain[0]) and torch.equal(t.output[1], plain[1])
    assert [op.func for op in t.ops if op.func.startswith("torch._native")] == ["torch._native_multi_head_attention"] * 2
    assert not seen_cross and torch.equal(t_cross.output[0], plain_cross)
    assert not any(op.func.startswith("torch._native") for op in t_cross.ops)


def test_encoder_sparsity_path_with_a_padding_mask_is_disclosed_with_its_consequence():
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2).eval()
    x = torch.randn(2, 5, 32)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad():
        plain = enc(x, src_key_padding_mask=pad)
        t, seen = _trace_quiet(enc, (x,), input_kwargs={"src_key_padding_mask": pad})
    assert not torch.equal(t.output, plain)  # the padded rows really differ: zeros in the plain forward
    root = [w for w in t.warnings if w.startswith(f"[{FAST_PATH_CODE}] TransformerEncoder '(root)'")]
    assert len(root) == 1 and "torch._nested_tensor_from_mask" in root[0] and "zeros" in root[0]
    # The encoder's nested-tensor path is disclosed; inside it each layer runs its fused kernel.
    assert len(seen) == 1
    assert sum(op.func == "torch._transformer_encoder_layer_fwd" for op in t.ops) == 2
