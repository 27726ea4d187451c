"""A meta build keeps what legacy constructors make on the CPU: refused with the remedy that works."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tracer import errors

SO = tracer.CaptureOptions(structure_only=True)


class _LegacyBias(nn.Module):
    """A parameter made with a legacy constructor (as HuBERT's masked_spec_embed, XLNet's q/k/v are)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bias_u = nn.Parameter(torch.Tensor(4).uniform_())  # ignores `with torch.device('meta')`

    def forward(self, x):
        return self.lin(x) + self.bias_u


def test_legacy_constructor_state_refuses_with_the_move_remedy_and_the_remedy_works():
    with torch.device("meta"):
        twin = _LegacyBias().eval()
    assert not twin.bias_u.is_meta and twin.lin.weight.is_meta
    x = torch.randn(2, 4)
    with pytest.raises(errors.MixedSubstrateError) as info:
        tracer.trace(twin, (x.to("meta"),), capture=SO)
    assert info.value.findings["real_side"] == ["bias_u"] and "model.to('meta')" in info.value.remedy
    st = tracer.trace(twin.to("meta"), (x.to("meta"),), capture=SO)
    torch.manual_seed(0)
    assert st.discharge_against(tracer.trace(_LegacyBias().eval(), (x,))).state == "CORROBORATED"
