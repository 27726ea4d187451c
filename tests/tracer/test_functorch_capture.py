"""A forward that calls torch.vmap (transformers' mask functions do): captured, the transform disclosed."""
from __future__ import annotations

import torch
from torch import nn

import tracer


class _VmapMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        idx = torch.arange(x.shape[0])
        mask = torch.vmap(lambda i: (idx <= i).float())(idx)  # a causal mask built under vmap
        return mask @ self.lin(x)


def test_a_vmap_inside_the_forward_is_captured_and_disclosed():
    torch.manual_seed(0)
    model = _VmapMask().eval()
    x = torch.randn(5, 4)
    plain = model(x)
    t = tracer.trace(model, (x,))
    assert torch.equal(t.output, plain)
    assert any("functorch transform" in w for w in t.warnings)
    assert torch._C._functorch.peek_interpreter_stack() is None
    assert not any(torch._C._functorch.is_functorch_wrapped_tensor(v) for v in t.values.values())
    assert tracer.validate(t).passed
