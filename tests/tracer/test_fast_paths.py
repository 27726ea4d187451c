"""[issue 11] Capture never silently changes the computation: fused fast paths it turns off are disclosed.

torch's TransformerEncoderLayer and MultiheadAttention run one fused kernel in a plain eval
forward without grad; under capture (a TorchFunctionMode plus hooks) they take the op-by-op path.
Each such call carries a typed warning; wherever no warning is given, `trace.output` is
bit-equal to the plain forward.
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


def test_encoder_in_eval_without_grad_warns_per_layer_naming_both_paths():
    enc, x = _encoder(), torch.randn(2, 5, 32)
    with torch.no_grad():
        plain = enc(x)
        t, seen = _trace_quiet(enc, (x,))
    assert FastPathNotTakenWarning.code == FAST_PATH_CODE == "fast_path_not_taken"
    assert len(seen) == 2  # one per layer; the attention inside a reported layer is not repeated
    notes = [w for w in t.warnings if w.startswith(f"[{FAST_PATH_CODE}]")]
    assert len(notes) == 2
    for i, note in enumerate(notes):
        assert f"TransformerEncoderLayer 'layers.{i}'" in note
        assert "torch._transformer_encoder_layer_fwd" in note and "op-by-op" in note
    # The recorded ops are what ran: the trace's output is the traced forward's own result.
    assert t.output.shape == plain.shape
    assert tracer.validate(t)
    # The typed record travels with the trace (provenance, saved and loaded) for the banner and exports.
    fused = t.provenance.fast_paths
    assert sorted(fused) == ["layers.0", "layers.1"]
    assert fused["layers.0"]["plain_path"].startswith("torch._transformer_encoder_layer_fwd")


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


def test_multihead_attention_self_attention_warns_and_cross_attention_does_not():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x, y = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    with torch.no_grad():
        t, seen = _trace_quiet(mha, (x, x, x))
        assert len(seen) == 1 and "torch._native_multi_head_attention" in str(seen[0].message)
        plain_cross = mha(x, y, y)[0]
        t_cross, seen_cross = _trace_quiet(mha, (x, y, y))
    assert not seen_cross and torch.equal(t_cross.output[0], plain_cross)


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
    assert len(seen) == 3  # the encoder and both layers
