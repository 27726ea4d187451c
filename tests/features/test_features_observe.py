"""The sweep's independent observer and gap check find what a trace misses (so `silent` can be reported)."""
from __future__ import annotations

from collections import Counter

import torch
from torch import nn

import tracer
from tests.features.cases import MLP
from tests.features.observe import ParamReads, gaps, kinds, state_names


def _mlp_and_reads():
    torch.manual_seed(0)
    m, x = MLP().eval(), torch.randn(3, 8)
    with ParamReads(m) as observer:
        m(x)
    return m, x, observer.read


def test_observer_records_every_parameter_the_plain_forward_reads():
    _, _, reads = _mlp_and_reads()
    assert reads == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}


def test_a_complete_trace_has_no_gaps():
    m, x, reads = _mlp_and_reads()
    t = tracer.trace(m, (x,))
    assert gaps(t, reads, set(state_names(m).values()), ("linear",), kinds(t)) == []


def test_gaps_name_unconsumed_parameters_constant_outputs_absent_kinds_and_extra_ops():
    m, x, reads = _mlp_and_reads()

    class Detached(nn.Module):  # the MLP's output computed outside any recorded op, then returned
        def __init__(self):
            super().__init__()
            self.inner = m

        def forward(self, x):
            return torch.tensor(self.inner(x).tolist())

    t = tracer.trace(Detached(), (x,))
    own = set(state_names(m).values())
    found = gaps(t, {"inner." + r for r in reads}, own, ("linear",), Counter({"linear": 2, "relu": 1}))
    text = " ".join(found)
    assert "output output_1 is computed from neither an input nor a parameter" in text
    plain = tracer.trace(m, (x,))
    extra = gaps(plain, reads, own, ("conv",), Counter({"linear": 1}))
    assert any("expected op kinds not recorded: conv" in g for g in extra)
    assert any("extra {'linear': 1, 'relu': 1}" in g for g in extra)
    assert gaps(plain, reads | {"fc3.weight"}, own)[0].endswith("consumed by no op: fc3.weight")


def test_observer_sees_packed_quantized_weights_and_a_trace_naming_their_layer_covers_them():
    import warnings

    from tests.features.observe import _matches

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(8, 4)), {nn.Linear}, dtype=torch.qint8)
        with ParamReads(q) as observer:
            q(torch.randn(2, 8))
    assert observer.read == {"0._packed_params._packed_params (packed)"}
    assert _matches("0._packed_params._packed_params", "0._packed_params._packed_params (packed)")
    assert _matches("0.weight", "0._packed_params._packed_params (packed)")
    assert not _matches("1.weight", "0._packed_params._packed_params (packed)")
