"""`tracer.summary` (summarize_model): structure-only chosen for meta models, estimates labelled."""
from __future__ import annotations

import pytest
import torch

from tests.models import tiny_gpt2, tiny_resnet
from tracer import errors
from tracer.estimates import trace_totals
from tracer.model_summary import summarize_model


def meta_twin(real):
    with torch.device("meta"):
        twin = type(real)(real.config)
    return twin.eval()


def test_meta_model_selects_structure_only_and_records_it(capsys):
    text, t = summarize_model(meta_twin(tiny_gpt2()), input_shape=(1, 8), return_trace=True)
    assert capsys.readouterr().out.strip() == text.strip()
    assert t.structure_only and t.values == {}
    assert t.provenance["summary"]["structure_only"] is True
    assert "selected automatically" in t.provenance["summary"]["how"]
    assert t.provenance["summary"]["input_dtype"] == "int64"
    assert text.splitlines()[0].startswith("claim ladder: HYPOTHESIS")
    assert "GPT2Block x2" in text
    totals = trace_totals(t)
    assert f"{t.param_count():,} parameters" in text
    assert "FLOPs (estimate from shapes)" in text and "activation bytes (estimate from shapes)" in text
    assert "parameter bytes (declared geometry)" in text and totals["flops_estimate"] > 0


def test_real_model_is_captured_eagerly():
    text, t = summarize_model(tiny_gpt2(), print_summary=False, return_trace=True)
    assert not t.structure_only and t.ladder_state == "OBSERVED" and text.startswith("claim ladder: OBSERVED")


def test_float_input_models_get_float_inputs():
    _, t = summarize_model(meta_twin(tiny_resnet()), input_shape=(1, 3, 32, 32), print_summary=False,
                           return_trace=True)
    assert t.inputs[0].out.dtype == "float32" and t.structure_only


def test_weights_free_view_of_a_real_model_refuses():
    with pytest.raises(errors.RealStateWithStructureOnlyError) as info:
        summarize_model(tiny_gpt2(), structure_only=True, print_summary=False)
    assert "from_config" in info.value.remedy
