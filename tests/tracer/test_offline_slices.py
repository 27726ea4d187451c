"""Offline replay of slices whose bounds are small integer tensors or numpy scalars (as VITS slices)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import tracer
from tracer.replay.offline import NotReplayable, _decode_atom


class _TensorBounds(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 8)

    def forward(self, x):
        h = self.lin(x)
        n = torch.IntTensor([4])  # VITS: num_channels_tensor
        return torch.tanh(h[:, :n]) * torch.sigmoid(h[:, n:]) * np.int64(3) + h[..., None, :4].sum(-2)


def test_a_slice_bounded_by_a_small_int_tensor_is_stored_and_replays_offline(tmp_path):
    model = _TensorBounds()
    t = tracer.trace(model, (torch.randn(2, 4),))
    stored = [op.attrs for op in t.ops if op.kind == "getitem"]
    assert {"slice": [None, {"tensor": None, "value": {"dtype": "int32", "shape": [1], "data": [4]}}, None]} in \
        stored[0]["args"][1]["tuple"]
    assert not any("opaque" in str(op.attrs) for op in t.ops)  # the numpy scalar is stored as a number
    t.save(tmp_path / "t")
    report = tracer.validate(tracer.load(tmp_path / "t"), params=model)
    assert report.passed, report.findings[:2]


@pytest.mark.parametrize("bad", [[None, None], [None, "x", None], [None, {"tensor": None, "value": {
    "dtype": "float32", "shape": [], "data": [1.5]}}, None], "0:3"])
def test_a_malformed_stored_slice_refuses_typed(bad):
    with pytest.raises(NotReplayable):
        _decode_atom("slice", bad, lambda b: b if not isinstance(b, dict) else _value(b))


def _value(b):
    from tracer.replay.offline import tensor_from_value

    return tensor_from_value(b["value"])
