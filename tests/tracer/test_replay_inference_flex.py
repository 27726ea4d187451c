"""Two validation defects: a model built under torch.inference_mode replays from a trace file (its
parameters are inference tensors, which cannot require grad outside the mode), and flex attention's
logsumexp / row-max outputs are not failed for not reading the values argument."""
from __future__ import annotations

import warnings

import torch
from torch import nn

import tracer
from tests.features.cases import FlexAttention
from tracer.replay.interpreter import dependence_declared_absent


def test_inference_mode_trace_replays_offline(tmp_path):
    with torch.inference_mode():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
        trace = tracer.trace(model, (torch.randn(3, 8),))
    assert next(model.parameters()).is_inference()
    trace.save(tmp_path / "t")
    report = tracer.validate(tracer.load(tmp_path / "t"), params=model)
    assert report.passed, report.to_text()
    assert report.ops_exact == report.ops_replayed > 0


def test_flex_attention_value_edge_is_excused_only_for_its_score_outputs():
    torch.manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = tracer.trace(FlexAttention().eval(), (torch.randn(1, 8, 16),))
        report = tracer.validate(trace)
    assert report.passed, report.to_text()
    flex = [op for op in trace.ops if op.kind == "flex_attention"]
    assert len(flex) >= 2
    assert not dependence_declared_absent(flex[0], "2")  # the attention output reads the values
    assert all(dependence_declared_absent(op, "2") for op in flex[1:])  # logsumexp, row maxima: scores only
    assert all(not dependence_declared_absent(op, p) for op in flex for p in ("0", "1"))
