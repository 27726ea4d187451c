"""An eval-mode cache of a parameter (as LeViT keeps): the invariant names the cause and a remedy that works."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tracer import errors


class _CachedBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.biases = nn.Parameter(torch.randn(3))
        self.register_buffer("idx", torch.tensor([0, 2, 1, 1]), persistent=False)
        self.cache: dict = {}

    def train(self, mode: bool = True):
        super().train(mode)
        if mode:
            self.cache = {}  # cleared on train(), filled by the first eval forward
        return self

    def forward(self, x):
        if self.training:
            bias = self.biases[self.idx]
        else:
            if str(x.device) not in self.cache:
                self.cache[str(x.device)] = self.biases[self.idx]
            bias = self.cache[str(x.device)]
        return self.lin(x) + bias


def test_a_cached_parameter_read_is_a_typed_invariant_with_a_remedy_that_works():
    torch.manual_seed(0)
    model = _CachedBias().eval()
    x = torch.randn(2, 4)
    model(x)  # fills the cache: the next forward reads it, not the parameter
    with pytest.raises(errors.TraceInvariantError) as info:
        tracer.validate(tracer.trace(model, (x,)))
    assert "'biases'" in info.value.message and "cache" in info.value.message
    assert "model.train(); model.eval()" in info.value.remedy
    model.train()
    model.eval()
    t = tracer.trace(model, (x,))
    assert any("biases" in op.params for op in t.ops) and tracer.validate(t).passed
