"""The discharge workflow the side panel runs: estimate, polite refusal, capture, discharge."""
from __future__ import annotations

import copy

import pytest

from app import twin
from app.ladder import ladder_view, report_rows
from app.errors import TwinTooLargeError
from tracer.errors import DischargePreflightError


def test_memory_estimate_is_params_times_dtype_plus_activations(default_loaded):
    est = twin.estimate(twin.TwinSpec(config="llama-3.1-8b", dtype="float32"), default_loaded.trace)
    assert est.params == 8_030_261_248
    assert est.param_bytes == 4 * 8_030_261_248
    half = twin.estimate(twin.TwinSpec(config="llama-3.1-8b", dtype="bfloat16"), default_loaded.trace)
    assert half.param_bytes * 2 == est.param_bytes and half.activation_bytes > 0
    assert est.available_bytes == pytest.approx(twin.available_memory(), rel=0.2)
    assert est.fits == (est.total_bytes <= est.available_bytes * twin.HEADROOM)


def test_too_large_twin_is_declined_typed_with_a_remedy():
    est = twin.MemoryEstimate(params=8_030_261_248, param_bytes=32 * 2**30, activation_bytes=0,
                              available_bytes=24 * 2**30)
    assert not est.fits and "does not fit" in est.describe()
    with pytest.raises(TwinTooLargeError) as info:
        twin.check_fits(est, twin.TwinSpec(config="llama-3.1-8b"))
    assert info.value.code == "twin_exceeds_memory" and "bfloat16" in info.value.remedy
    ok = twin.MemoryEstimate(params=1, param_bytes=2**20, activation_bytes=0, available_bytes=24 * 2**30)
    twin.check_fits(ok, twin.TwinSpec(config="gpt2"))


def test_defaults_follow_the_structure_capture(gpt2_loaded, default_loaded):
    assert twin.structure_defaults(gpt2_loaded.trace)[0] == "float32"
    assert twin.structure_defaults(default_loaded.trace)[0] == "bfloat16"


@pytest.mark.slow
def test_gpt2_twin_corroborates_and_a_bfloat16_twin_refutes(gpt2_loaded):
    seen = []
    structure = copy.copy(gpt2_loaded.trace)
    dtype, attn = twin.structure_defaults(structure)
    report, real = twin.discharge(structure, twin.TwinSpec(config="gpt2", dtype=dtype, attn=attn),
                                  lambda f, s: seen.append(f))
    assert report.contradiction is None and structure.ladder_state == "HYPOTHESIS"  # discharge changes no trace
    assert structure.with_envelope(report.envelope).ladder_state == "CORROBORATED" == report.state
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert real.ladder_state == "OBSERVED" and not structure.values
    assert [r["status"] for r in report_rows(report)] == ["holds", "holds", "holds"]

    wrong = copy.copy(gpt2_loaded.trace)
    report, _ = twin.discharge(wrong, twin.TwinSpec(config="gpt2", dtype="bfloat16", attn=attn), lambda f, s: None)
    lv = ladder_view(wrong, report)
    assert lv.state == "REFUTED" and "dtype claimed 'float32', observed 'bfloat16'" in lv.detail


@pytest.mark.slow
def test_another_config_is_refused_by_the_preflight_and_changes_nothing(gpt2_loaded):
    structure = copy.copy(gpt2_loaded.trace)
    before = structure.envelope
    with pytest.raises(DischargePreflightError):
        twin.discharge(structure, twin.TwinSpec(config="bert-base", attn="sdpa"), lambda f, s: None)
    assert structure.envelope is before and structure.ladder_state == "HYPOTHESIS"


def test_twin_inputs_from_ids_text_or_seed(tmp_path):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tracer.errors import InvalidInputError

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 5, "world": 7}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    ids = twin.twin_inputs(twin.TwinSpec(config="gpt2", text="hello world", tokenizer=str(tmp_path)))
    assert ids.tolist() == [[5, 7]]
    assert twin.twin_inputs(twin.TwinSpec(config="gpt2", ids="1, 2 3")).tolist() == [[1, 2, 3]]
    a = twin.twin_inputs(twin.TwinSpec(config="gpt2", seed=3, input_shape=(2, 4)))
    assert a.shape == (2, 4) and torch.equal(a, twin.twin_inputs(twin.TwinSpec(config="gpt2", seed=3, input_shape=(2, 4))))
    with pytest.raises(InvalidInputError):
        twin.twin_inputs(twin.TwinSpec(config="gpt2", ids="one two"))
    with pytest.raises(InvalidInputError):
        twin.twin_inputs(twin.TwinSpec(config="gpt2", text="hello"))


@pytest.mark.slow
def test_the_panel_discharges_with_the_twin_captured_in_a_child_process(gpt2_loaded):
    structure = copy.copy(gpt2_loaded.trace)
    dtype, attn = twin.structure_defaults(structure)
    seen = []
    report, envelope = twin.discharge_copy(structure, twin.TwinSpec(config="gpt2", dtype=dtype, attn=attn),
                                           lambda f, s: seen.append(s))
    assert report.contradiction is None and envelope.ladder_state == "CORROBORATED"
    assert structure.ladder_state == "HYPOTHESIS"  # the copy changed, not the session's trace
    assert any("handing it back" in s for s in seen)


def test_a_refusal_in_the_child_comes_back_typed(gpt2_loaded):
    from tracer.errors import InvalidInputError

    _, attn = twin.structure_defaults(gpt2_loaded.trace)
    with pytest.raises(InvalidInputError) as info:  # ids of the recorded shape (1, 8), one out of range
        twin.capture_isolated(twin.TwinSpec(config="gpt2", attn=attn, ids="1, 2, 3, 4, 5, 6, 7, 99999999"),
                              gpt2_loaded.trace, lambda f, s: None)
    assert info.value.code == "token_id_out_of_range"
    with pytest.raises(DischargePreflightError):  # the comparability check runs in the child too
        twin.capture_isolated(twin.TwinSpec(config="bert-base", attn=attn), gpt2_loaded.trace, lambda f, s: None)
