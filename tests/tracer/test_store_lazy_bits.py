"""A saved value that is a conjugate or negative view (a bit over its base's storage) loads as the values
the forward computed: the store wrote the storage bytes, so `x.conj()` loaded as `x` (Autoformer's FFT
autocorrelation, reload_validate in the zoo)."""
from __future__ import annotations

import torch
from torch import nn

import tracer


class Spectra(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        spec = torch.fft.rfft(self.fc(x), dim=-1)
        conj = torch.conj(spec)  # a conjugate view: the bit, over spec's storage
        neg = torch._neg_view(spec)  # a negative view
        return torch.fft.irfft(spec * conj + neg, n=8, dim=-1)


def test_conjugate_and_negative_views_are_saved_as_their_values(tmp_path):
    torch.manual_seed(0)
    model = Spectra().eval()
    trace = tracer.trace(model, (torch.randn(2, 8),))
    lazy = [op.label for op in trace.ops if op.label in trace.values
            and (trace.values[op.label].is_conj() or trace.values[op.label].is_neg())]
    assert lazy  # the case this test is about
    trace.save(tmp_path / "t")
    loaded = tracer.load(tmp_path / "t")
    for label in lazy:
        assert torch.equal(loaded.values[label], trace.values[label].resolve_conj().resolve_neg()), label
    report = tracer.validate(loaded, params=model)
    assert report.passed, report.to_text()


def test_a_replay_difference_in_complex_values_is_measured_on_both_parts():
    from tracer.replay.validate import _diff

    a = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    assert _diff(a, a.conj().resolve_conj()) == "max abs diff 4.000e+00, 2 of 2 elements"  # was "0.000e+00, 0 of 2"
