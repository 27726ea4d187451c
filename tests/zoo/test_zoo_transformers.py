"""CI sample of the zoo: 28 transformers families (tests/zoo/known.py's HF_SAMPLE: encoders, decoders, MoE,
encoder-decoders, convolutional and vision-transformer image models, audio, text-and-image), one class of
each (`sampled_classes`), every column. The full sweep (tests/zoo/results.json) has every class.

Each case asserts what should hold: the plain forward runs, capture is bit-equal, validation
passes (also after save and load), the weights-free capture on meta discharges CORROBORATED,
and no untyped exception escapes. Cases listed in tests/zoo/known.py are xfail(strict=False).
"""
from __future__ import annotations

import pytest

from tests.zoo.hf import classes_of, sweep_class
from tests.zoo.known import HF_ALL_KNOWN, HF_KNOWN, HF_SAMPLE

pytestmark = pytest.mark.slow
_rows: dict[tuple[str, str], dict] = {}


def row_of(model_type: str, cls: str) -> dict:
    if (model_type, cls) not in _rows:
        _rows[(model_type, cls)] = sweep_class(model_type, cls)
    return _rows[(model_type, cls)]


# Families whose base model runs what its head does not: CLIPModel reads text and an image together
# (CLIPForImageClassification the image alone); BartModel is the encoder-decoder (BartForCausalLM its decoder).
BASE_AND_HEAD = ("bart", "clip")


def sampled_classes(model_type: str) -> list[str]:
    """The classes of `model_type` the CI sample sweeps: the main head, which holds the base model (its
    forward runs inside the head's), or the base model where no head is mapped; both for BASE_AND_HEAD."""
    classes = classes_of(model_type)
    return classes if model_type in BASE_AND_HEAD else classes[-1:]


def _cases(column: str) -> list:
    cases = []
    for model_type in HF_SAMPLE:
        for cls in sampled_classes(model_type):
            known = HF_ALL_KNOWN.get(column) or HF_KNOWN.get((model_type, column)) or HF_KNOWN.get((cls, column))
            marks = [pytest.mark.xfail(strict=False, reason=f"{known} (tests/zoo/known.py)")] if known else []
            cases.append(pytest.param(model_type, cls, marks=marks, id=f"{model_type}-{cls}"))
    return cases


@pytest.mark.parametrize("model_type,cls", _cases("capture"))
def test_forward_runs_and_capture_is_bit_equal(model_type, cls):
    row = row_of(model_type, cls)
    assert row["forward"]["result"] == "pass", row["forward"]
    assert row["capture"]["result"] == "pass", row["capture"]


@pytest.mark.parametrize("model_type,cls", _cases("validate"))
def test_validate_passes(model_type, cls):
    assert row_of(model_type, cls)["validate"]["result"] == "pass", row_of(model_type, cls)["validate"]


@pytest.mark.parametrize("model_type,cls", _cases("reload_validate"))
def test_saved_and_loaded_trace_validates(model_type, cls):
    outcome = row_of(model_type, cls)["reload_validate"]
    assert outcome["result"] == "pass", outcome


@pytest.mark.parametrize("model_type,cls", _cases("weights_free"))
def test_weights_free_capture_discharges_corroborated(model_type, cls):
    row = row_of(model_type, cls)
    assert row["weights_free"]["result"] == "pass", row["weights_free"]
    assert row["discharge"]["result"] == "pass", row["discharge"]


@pytest.mark.parametrize("model_type,cls", _cases("untyped"))
def test_no_untyped_exception_in_any_column(model_type, cls):
    row = row_of(model_type, cls)
    untyped = {k: v for k, v in row.items() if isinstance(v, dict) and v.get("result") == "untyped"}
    known = {k for k in untyped if (model_type, k) in HF_KNOWN}
    if untyped and set(untyped) == known:
        pytest.xfail(f"{', '.join(HF_KNOWN[(model_type, k)] for k in sorted(known))} (tests/zoo/known.py)")
    assert not untyped
