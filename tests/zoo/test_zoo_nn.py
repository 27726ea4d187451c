"""CI sample of the zoo: every torch.nn layer in the table, train/eval, with and without no_grad.

Each case asserts what should hold: no untyped exception, capture bit-equal to the plain forward,
validation passes. Cases listed in tests/zoo/known.py are xfail(strict=False) with their class.
"""
from __future__ import annotations

import pytest

from tests.zoo.known import NN_KNOWN
from tests.zoo.nn_layers import LAYERS, SKIPPED, VARIANTS, public_layers, sweep_layer

_rows: dict[str, dict] = {}


def row_of(layer: str) -> dict:
    if layer not in _rows:
        _rows[layer] = sweep_layer(layer)
    return _rows[layer]


def _cases(column: str) -> list:
    cases = []
    for layer in sorted(LAYERS):
        for variant in VARIANTS:
            known = NN_KNOWN.get((layer, column))
            marks = [pytest.mark.xfail(strict=False, reason=f"{known[0]} (tests/zoo/known.py)")] \
                if known and variant in known[1] else []
            cases.append(pytest.param(layer, variant, marks=marks, id=f"{layer}-{variant}"))
    return cases


def test_table_covers_every_public_layer():
    assert set(public_layers()) == set(LAYERS) | set(SKIPPED)
    assert not set(LAYERS) & set(SKIPPED)


@pytest.mark.parametrize("layer,variant", _cases("capture"))
def test_capture_is_bit_equal(layer, variant):
    outcome = row_of(layer)[f"{variant}.capture"]
    assert outcome["result"] == "pass", outcome


@pytest.mark.parametrize("layer,variant", _cases("validate"))
def test_validate_passes(layer, variant):
    outcome = row_of(layer)[f"{variant}.validate"]
    assert outcome["result"] == "pass", outcome


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_no_untyped_exception(layer):
    untyped = {k: v for k, v in row_of(layer).items() if isinstance(v, dict) and v.get("result") == "untyped"}
    if layer == "MultiheadAttention" and untyped:
        pytest.xfail("validate_untyped (tests/zoo/known.py)")
    assert not untyped
