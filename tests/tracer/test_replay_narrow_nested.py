"""Replay and perturbation of tensors torch computes little on: fp8 parents and outputs (no add/neg/equal
kernels on CPU) and jagged nested tensors (torch.equal on them raises inside torch)."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.features.cases import Fp8, Jagged, _jagged
from tracer.replay.batch import same
from tracer.replay.edges import _perturbations, _strong_perturbations, max_abs

FP8 = [d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d is not None]


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_trace_validates_with_every_edge_perturbed(dtype, tmp_path):
    torch.manual_seed(0)
    model = Fp8(dtype).eval()
    trace = tracer.trace(model, (torch.randn(3, 8),))
    report = tracer.validate(trace)
    assert report.passed, report.to_text()
    assert report.edges_carrying == report.edges_checked > 0
    trace.save(tmp_path / "t")
    assert tracer.validate(tracer.load(tmp_path / "t"), params=model).passed


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_perturbations_change_the_tensor_and_keep_its_dtype(dtype):
    t = (torch.randn(4, 4, generator=torch.Generator().manual_seed(3)) * 0.5).to(dtype)
    gen = torch.Generator().manual_seed(0)
    for p in [*_perturbations(t, gen), *_strong_perturbations(t, gen)]:
        assert p.dtype == dtype and p.shape == t.shape and p.stride() == t.stride()
    assert not same(next(iter(_perturbations(t, gen))), t)
    assert same(t, t.clone())


def test_jagged_trace_validates_with_every_edge_perturbed():
    torch.manual_seed(0)
    trace = tracer.trace(Jagged().eval(), _jagged("cpu"))
    report = tracer.validate(trace)
    assert report.passed, report.to_text()
    assert report.ops_exact == report.ops_replayed and report.edges_carrying == report.edges_checked > 0


def test_jagged_equality_and_perturbation_by_parts():
    nt = _jagged("cpu")[0]
    other = torch.nested.nested_tensor_from_jagged(nt.values() + 1, nt.offsets())
    assert same(nt, torch.nested.nested_tensor_from_jagged(nt.values().clone(), nt.offsets()))
    assert not same(nt, other)
    assert max_abs(nt, other) == pytest.approx(1.0, abs=1e-6)
    p = next(iter(_perturbations(nt, torch.Generator().manual_seed(0))))
    assert p.is_nested and p.shape == nt.shape and not same(p, nt)
