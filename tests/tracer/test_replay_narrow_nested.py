"""Replay and perturbation of tensors torch computes little on: fp8 parents and outputs (no add/neg/equal
kernels on CPU) and jagged nested tensors (torch.equal on them raises inside torch)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tracer.replay.batch import same
from tracer.replay.edges import _perturbations, _strong_perturbations, max_abs

FP8 = [d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d is not None]


class Fp8Upcast(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.register_buffer("w8", (torch.randn(8, 8) * 0.5).to(dtype))

    def forward(self, x):
        return self.fc(x @ self.w8.float()) + self.fc.weight.to(self.w8.dtype).float().sum()


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_trace_validates_with_every_edge_perturbed(dtype, tmp_path):
    torch.manual_seed(0)
    model = Fp8Upcast(dtype).eval()
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


def _jagged():
    g = torch.Generator().manual_seed(1)
    return torch.nested.nested_tensor([torch.randn(n, 8, generator=g) for n in (2, 5, 3)], layout=torch.jagged)


class Jagged(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, nt):
        return torch.relu(self.fc(nt))


def test_jagged_trace_validates_with_every_edge_perturbed():
    torch.manual_seed(0)
    trace = tracer.trace(Jagged().eval(), (_jagged(),))
    report = tracer.validate(trace)
    assert report.passed, report.to_text()
    assert report.ops_exact == report.ops_replayed and report.edges_carrying == report.edges_checked > 0


def test_jagged_equality_and_perturbation_by_parts():
    nt = _jagged()
    other = torch.nested.nested_tensor_from_jagged(nt.values() + 1, nt.offsets())
    assert same(nt, torch.nested.nested_tensor_from_jagged(nt.values().clone(), nt.offsets()))
    assert not same(nt, other)
    assert max_abs(nt, other) == pytest.approx(1.0, abs=1e-6)
    p = next(iter(_perturbations(nt, torch.Generator().manual_seed(0))))
    assert p.is_nested and p.shape == nt.shape and not same(p, nt)
