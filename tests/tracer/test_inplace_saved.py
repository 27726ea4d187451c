"""[issue 11] Every value replay needs is saved as it was when produced, without eager copies.

An in-place write to a tensor, to its base, or to any view sharing its storage first copies the
saved values living on that storage (copy-on-write); a reader of a base written through one of
its views replays from that base rebuilt after the write. A write the capture never sees stays a
typed "not replayable" finding naming the op.
"""
from __future__ import annotations

import torch
from torch import nn

import tracer
from tracer.replay.validate import validation_report


def _passes(model, *args):
    t = tracer.trace(model, args)
    report = validation_report(t)
    assert report.passed, report.to_text()
    assert not [w for w in t.warnings if "changed in place" in w]
    return t, report


class _SiblingViews(nn.Module):
    def forward(self, x):
        h = x * 2
        first, second = h[0], h[1]  # two views of one storage
        first.mul_(3)  # bumps the version counter second shares
        return second + 1, h.sum()


def test_a_view_whose_sibling_is_written_in_place_is_saved_as_it_was():
    t, _ = _passes(_SiblingViews(), torch.randn(2, 4))
    second = [op for op in t.ops if op.kind == "getitem"][1]
    assert second.label in t.values
    assert torch.equal(t.values[second.label], t.values["mul_1"][1])  # the value before the write


class _Mrope(nn.Module):
    """Qwen3-VL / Cosmos3 style: a view of row 0 overwritten in strides from rows 1 and 2."""

    def forward(self, x):
        freqs = x.unsqueeze(0).expand(3, -1, -1) * torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)
        f = freqs[0]
        f[..., 1:7:3] = freqs[1, ..., 1:7:3]
        f[..., 2:8:3] = freqs[2, ..., 2:8:3]
        return f * 2


def test_a_base_written_through_its_views_and_read_again_replays():
    t, _ = _passes(_Mrope(), torch.randn(4, 9))
    getitems = [op for op in t.ops if op.kind == "getitem"]
    assert all(op.label in t.values for op in getitems)


class _KeyConcat(nn.Module):
    """GLM4-MoE-Lite style: new_empty filled through two slice views with copy_, then read whole."""

    def forward(self, a, b):
        k = a.new_empty(a.shape[0], 6)
        k[..., :4].copy_(a * 2)
        k[..., 4:].copy_(b + 1)
        return k @ k.T


def test_new_empty_filled_through_views_then_read_whole_replays():
    _passes(_KeyConcat(), torch.randn(3, 4), torch.randn(3, 2))


class _BumpLastBin(nn.Module):
    """VITS style: `loc[..., -1] += eps` (an add_ on a view, then setitem of that view into its base)."""

    def forward(self, x):
        loc = torch.cumsum(x.softmax(-1), dim=-1)
        loc[..., -1] += 1e-6
        return (x[..., None] >= loc[..., None, :]).sum(-1), loc * 2


def test_an_augmented_assignment_into_a_view_replays():
    _passes(_BumpLastBin(), torch.randn(3, 5))


def test_cross_map_lrn2d_replays_in_train_and_eval():
    for train in (True, False):
        layer = nn.CrossMapLRN2d(3).train(train)
        _passes(layer, torch.randn(1, 4, 3, 3))


def test_train_mode_batchnorm_replays():
    _passes(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).train(), torch.randn(5, 4))


class _NoWrites(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x).relu()


def test_values_nothing_writes_are_not_copied():
    t = tracer.trace(_NoWrites(), (torch.randn(2, 4),))
    relu = next(op for op in t.ops if op.kind == "relu")
    assert t.values[relu.label].data_ptr() == t.output.data_ptr()  # the very tensor, no copy


class _WriteBehindTheCapture(nn.Module):
    def forward(self, x):
        h = x * 2
        with torch._C.DisableTorchFunction():  # a write the function mode never sees
            h.add_(1)
        return h + 1


def test_a_write_the_capture_never_sees_is_a_typed_not_replayable_finding_naming_the_op():
    t = tracer.trace(_WriteBehindTheCapture(), (torch.randn(2, 3),))
    report = validation_report(t)
    assert not report.passed
    first = report.findings[0]
    assert first.check == "missing" and first.label == "mul_1" and "not replayable: mul_1 not saved" in first.message
    assert any("changed in place" in w for w in t.warnings)
