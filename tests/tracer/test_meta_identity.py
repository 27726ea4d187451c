"""Tensor identity on meta (the reason TorchLens's `structure_only_meta_identity_unavailable` has no counterpart).

Every meta tensor reports `data_ptr() == 0`, so a capture that keyed tensors by storage address would
merge sibling meta allocations. This capture keys a tensor by the Python object (`id`, with a weak
reference), routes an in-place write through a view to the view's `_base`, and keys storage only to
copy saved values before a write, which a structure-only capture (no values) never does. So there is
no storage-identity primitive to self-test and nothing to refuse: siblings stay apart and view writes
reach their base on meta exactly as on a real device (docs/from-torchlens.md).
"""
from __future__ import annotations

import torch
from torch import nn

import tracer


class _SiblingsAndViews(nn.Module):
    """Two same-shaped clones of one tensor (sibling allocations), each written in place through a view."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        a, b = h.clone(), h.clone()
        a[:, :2].mul_(2.0)
        b.view(-1).add_(1.0)
        return a - b.relu()


def _parents(trace) -> dict[str, list[str]]:
    return {op.label: [e.source for e in op.parents] for op in trace.ops}


def test_sibling_meta_allocations_stay_apart_and_view_writes_reach_their_base():
    assert torch.empty(2, device="meta").data_ptr() == torch.empty(2, device="meta").data_ptr() == 0  # the premise
    torch.manual_seed(0)
    real = _SiblingsAndViews().eval()
    with torch.device("meta"):
        twin = _SiblingsAndViews().eval()
    x = torch.randn(3, 4)
    st = tracer.trace(twin, (x.to("meta"),), capture=tracer.CaptureOptions(structure_only=True))
    rt = tracer.trace(real, (x,))

    parents = _parents(st)
    assert parents["clone_1"] == parents["clone_2"] == ["linear_1"]
    assert parents["getitem_1"] == ["clone_1"] and parents["view_1"] == ["clone_2"]  # each sibling its own
    assert parents["relu_1"] == ["add__1"]  # `b` read after the write through its view: the write's output
    assert parents["sub_1"] == ["mul__1", "relu_1"]  # `a` likewise, and never `b`'s ops
    assert parents == _parents(rt)
    assert st.discharge_against(rt).state == "CORROBORATED"
