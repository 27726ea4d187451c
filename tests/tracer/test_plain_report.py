"""`tracer.plain_report.explain`: the plain-language report, its sections, and the token budget that drops whole sections."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_gpt2, tiny_llama
from tracer.errors import InvalidInputError
from tracer.plain_report import estimate_tokens, explain, explanation

SECTIONS = ("Capture status", "Size", "Module tree", "Op kinds", "Evidence")


@pytest.fixture(scope="module")
def meta_llama():
    real = tiny_llama()
    with torch.device("meta"):
        twin = type(real)(real.config).eval()
    return tracer.trace(twin, (torch.randint(0, 100, (1, 8)).to("meta"),),
                        capture=tracer.CaptureOptions(structure_only=True))


def test_the_whole_report_of_an_eager_trace():
    t = tracer.trace(tiny_gpt2(), (torch.randint(0, 50, (1, 5)),))
    text = explain(t)
    assert [line for line in text.splitlines() if line in SECTIONS + ("Truncation",)] == list(SECTIONS)
    assert "GPT2LMHeadModel" in text and "OBSERVED" in text and f"ops: {len(t.ops)}" in text
    assert "transformer.h.0 GPT2Block x2" in text  # the folded module tree
    assert "output_2..output_5 (4) [1, 4, 5, 8] float32" in text  # a run of like outputs written once


def test_a_budget_drops_whole_sections_from_the_end_and_says_which(meta_llama):
    whole = explanation(meta_llama)
    assert whole.dropped == () and whole.kept == SECTIONS and "HYPOTHESIS" in whole.text
    assert "no values exist" in whole.text and "discharge: none yet" in whole.text
    for budget in (whole.estimated_tokens - 1, whole.estimated_tokens // 2, 150):
        cut = explanation(meta_llama, max_tokens=budget)
        assert cut.estimated_tokens == estimate_tokens(cut.text) <= budget and not cut.over_budget
        assert cut.kept == SECTIONS[:len(cut.kept)] and cut.kept + cut.dropped == SECTIONS and cut.dropped
        assert f"dropped to fit {budget} tokens" in cut.text and ", ".join(cut.dropped) in cut.text
        assert all(f"\n{name}\n" not in f"\n{cut.text}" for name in cut.dropped)
    assert explanation(meta_llama, max_tokens=whole.estimated_tokens).text == whole.text


def test_the_capture_status_is_never_dropped(meta_llama):
    tiny = explanation(meta_llama, max_tokens=5)
    assert tiny.kept == ("Capture status",) and tiny.over_budget and tiny.estimated_tokens > 5
    assert "HYPOTHESIS" in tiny.text and "never dropped" in tiny.text


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_a_bad_budget_refuses_typed(meta_llama, bad):
    with pytest.raises(InvalidInputError) as info:
        explanation(meta_llama, max_tokens=bad)
    assert info.value.code == "invalid_input" and info.value.remedy
