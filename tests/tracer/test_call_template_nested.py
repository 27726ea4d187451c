"""A tuple argument led by a small buffer keeps its later tensors on their edges: Mimi's
`F.pad(x, (self.padding_total, extra))`, a 0-d buffer then a 0-d tensor computed in the forward, replayed
offline as "a tensor the trace does not know" (the buffer, small, was kept by value, and the tuple was then
not walked position by position as the capture walked it)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import tracer


class PadByTensors(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.left = nn.Buffer(torch.tensor(1), persistent=False)  # a buffer: no edge

    def forward(self, x):
        h = self.fc(x)
        extra = torch.ceil(torch.tensor(h.shape[-1]) / 3).to(torch.int64) - 2  # computed here: an edge
        return F.pad(h, (self.left, extra))


def test_a_tuple_led_by_a_kept_value_keeps_its_edges_and_replays_offline(tmp_path):
    torch.manual_seed(0)
    model = PadByTensors().eval()
    trace = tracer.trace(model, (torch.randn(2, 8),))
    pad = next(op for op in trace.ops if op.kind == "pad")
    padding = pad.attrs["args"][1]["tuple"]
    assert padding[0] == {"param": "left"}
    assert padding[1] == {"edge": "1.1"}
    assert tracer.validate(trace).passed
    trace.save(tmp_path / "t")
    report = tracer.validate(tracer.load(tmp_path / "t"), params=model)
    assert report.passed, report.to_text()
    assert report.ops_exact == report.ops_replayed > 0


class Runs(nn.Module):
    """torch.unique_consecutive is made by torch.functional's boolean_dispatch (qualname '...<locals>.fn')."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        _values, counts = torch.unique_consecutive(torch.tensor([1, 1, 2, 2, 2, 3]), return_counts=True)
        return self.fc(x).repeat_interleave(counts, dim=0)


def test_a_function_made_by_a_factory_is_stored_by_its_public_name_and_replays_offline(tmp_path):
    model = Runs().eval()
    trace = tracer.trace(model, (torch.randn(3, 4),))
    ops = [op for op in trace.ops if op.kind == "unique_consecutive"]  # its values and its counts
    assert ops and all(op.attrs["call"] == "torch.functional.unique_consecutive" for op in ops)
    trace.save(tmp_path / "t")
    report = tracer.validate(tracer.load(tmp_path / "t"), params=model)
    assert report.passed, report.to_text()
