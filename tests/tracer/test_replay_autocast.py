"""Replay re-enters autocast: an op recorded inside torch.autocast (CPU bf16) replays bit for bit, in this
process and from a trace file, and the report says which ops replayed inside which region."""
from __future__ import annotations

import torch
from torch import nn

import tracer


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def _autocast_trace():
    model, x = _mlp(), torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        trace = tracer.trace(model, (x,))
    return model, trace


def test_autocast_trace_validates_outside_the_region():
    _model, trace = _autocast_trace()
    assert [op.out.dtype for op in trace.ops if op.kind == "linear"] == ["bfloat16", "bfloat16"]
    report = tracer.validate(trace)  # run outside autocast: replay must enter it itself
    assert report.passed, report.to_text()
    assert report.ops_exact == report.ops_replayed
    linears = [op.label for op in trace.ops if op.kind == "linear"]
    assert set(report.autocast) == set(linears)
    assert set(report.autocast.values()) == {"autocast(cpu, bfloat16)"}
    assert "replayed inside autocast(cpu, bfloat16)" in report.to_text()
    assert report.edges_carrying == report.edges_checked > 0


def test_autocast_trace_validates_after_save_and_load(tmp_path):
    model, trace = _autocast_trace()
    trace.save(tmp_path / "t")
    loaded = tracer.load(tmp_path / "t")
    report = tracer.validate(loaded, params=model)
    assert report.passed, report.to_text()
    assert report.autocast


def test_plain_trace_reports_no_autocast():
    model = _mlp()
    report = tracer.validate(tracer.trace(model, (torch.randn(3, 8),)))
    assert report.passed and report.autocast == {}


def test_a_wrong_recorded_value_still_fails_inside_autocast():
    """The region only stands where it reproduces the recorded bits: a tampered bf16 value is a finding."""
    _model, trace = _autocast_trace()
    label = next(op.label for op in trace.ops if op.kind == "linear")
    trace.values[label].add_(1.0)
    report = tracer.validate(trace)
    assert not report.passed
    assert report.findings[0].label == label and report.findings[0].check == "replay"
