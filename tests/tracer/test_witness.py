"""The completeness witness: a dispatch census beside the capture finds computation below the ops."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2
from tracer.replay.validate import validate, validation_report
from tracer.witness import CaptureGapWarning

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


class _Hidden(nn.Module):
    """Computes part of its output where the torch function layer cannot see it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        with torch._C.DisableTorchFunction():
            z = y * 3.0  # an aten call no function-level op records
        return z + 1


def test_gpt2_has_no_gap_and_every_aten_call_is_attributed():
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureGapWarning)
        t = tracer.trace(tiny_gpt2(), (IDS,), capture=tracer.CaptureOptions(witness=True))
    census = t.provenance["witness"]
    assert census["gaps"] == 0 and census["attributed"] > len(t.ops) / 2
    assert t.provenance.get("verified") is not False
    assert validate(t)


def test_hidden_computation_marks_the_trace_unverified():
    with pytest.warns(CaptureGapWarning, match="below the recorded ops"):
        t = tracer.trace(_Hidden(), (torch.randn(2, 4),), capture=tracer.CaptureOptions(witness=True))
    census = t.provenance["witness"]
    assert census["gaps"] >= 1 and any("mul" in name for name in census["gap_ops"])
    assert t.provenance["verified"] is False and any("witness" in w for w in t.warnings)
    report = validation_report(t)
    assert not report.passed and report.findings[0].check == "verification"


def test_without_the_witness_the_gap_goes_unnoticed():
    t = tracer.trace(_Hidden(), (torch.randn(2, 4),))
    assert "witness" not in t.provenance and t.provenance.get("verified") is not False


def test_offload_hooks_count_as_bridged_not_as_gaps():
    accelerate = pytest.importorskip("accelerate")
    model = accelerate.cpu_offload(tiny_gpt2(), execution_device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureGapWarning)
        t = tracer.trace(model, (IDS,), capture=tracer.CaptureOptions(witness=True))
    assert t.provenance["witness"]["gaps"] == 0 and t.provenance.get("verified") is not False
