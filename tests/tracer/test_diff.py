"""tracer.diff on real tiny GPT-2s: identical runs, a planted weight change, an inserted block,
structure-only sides, tolerance, JSON and the saved file (refusals typed)."""
from __future__ import annotations

import copy
import json

import pytest
import torch

import tracer
from tracer.errors import (DiffFileCorruptError, DiffFileNotFoundError, DiffFileTamperedError, DiffInputError,
                           DiffSavePathError, DiffSchemaError)
from tests.models import tiny_gpt2

IDS = torch.tensor([[5, 17, 3, 42, 8, 99, 1, 60]])


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2()


@pytest.fixture(scope="module")
def base(gpt2):
    return tracer.trace(gpt2, (IDS,))


def test_two_captures_of_one_model_diff_empty(gpt2, base):
    d = tracer.diff(base, tracer.trace(gpt2, (IDS,)))
    assert d.is_empty and not d.structure_changed and d.first_divergence is None
    assert len(d.pairs) == len(base.ops) and d.values_compared
    assert all(x.rel_l2 == 0.0 and x.max_abs == 0.0 for x in d.divergences)
    assert "no differences" in d.to_text()
    assert d.divergent_modules() == []


def test_planted_change_is_first_divergence_at_that_layers_first_op(gpt2, base):
    planted = copy.deepcopy(gpt2)
    with torch.no_grad():
        planted.transformer.h[1].ln_1.weight.mul_(2.0)
    d = tracer.diff(base, tracer.trace(planted, (IDS,)))
    first = d.first_divergence
    assert first is not None and first.module == "transformer.h.1.ln_1"
    assert first.label_a == base.ops_in("transformer.h.1.ln_1")[0].label
    assert not d.structure_changed  # same structure, values part
    assert all(x.rel_l2 == 0.0 for x in d.divergences if x.index < first.index)  # nothing before it moved
    rollups = d.rollups()
    assert rollups["transformer.h.0"].ops_diverged == 0 and rollups["transformer.h.1"].ops_diverged > 0
    assert rollups["transformer.h.1"].output_rel_l2 > 0 and rollups["transformer.h.0"].output_rel_l2 == 0


def test_planted_linear_change_starts_at_the_op_reading_it(gpt2, base):
    planted = copy.deepcopy(gpt2)
    with torch.no_grad():
        planted.transformer.h[0].mlp.c_fc.weight.mul_(1.5)
    d = tracer.diff(base, tracer.trace(planted, (IDS,)))
    first = d.first_divergence
    assert first.module == "transformer.h.0.mlp.c_fc"
    assert "transformer.h.0.mlp.c_fc.weight" in base[first.label_a].params


def test_inserted_block_is_one_added_module_not_a_cascade():
    ids = IDS
    two, three = tracer.trace(tiny_gpt2(2), (ids,)), tracer.trace(tiny_gpt2(3), (ids,))
    d = tracer.diff(two, three)
    assert d.structure_changed
    assert not d.removed_ops and not d.changed_ops and not d.removed_modules and not d.changed_modules
    assert {m for m in d.added_modules if m.count(".") == 2} == {"transformer.h.2"}
    assert all(m.startswith("transformer.h.2") for m in d.added_modules)
    inside = [op for op in d.added_ops if "transformer.h.2" in op.scope]
    outputs = [op for op in d.added_ops if op not in inside]
    assert len(inside) == len(three.ops_in("transformer.h.2"))  # the block's own ops ...
    assert all(".layers.2." in op.io_path for op in outputs)  # ... and the cache entries of the new layer
    assert d.added_params and all(p.startswith("transformer.h.2.") for p in d.added_params)
    assert len(d.pairs) == len(two.ops)  # every op of the 2-layer trace found its match
    top = [r.address for r in d.divergent_modules() if r.status == "added"]
    assert top == ["transformer.h.2"]  # the added subtree is listed once, at its top
    assert "+ 2: GPT2Block  added" in d.to_text()


def test_structure_only_side_gives_a_structure_diff_and_says_so(base):
    from transformers import GPT2LMHeadModel

    with torch.device("meta"):
        meta = GPT2LMHeadModel(tiny_gpt2().config).eval()
    shadow = tracer.trace(meta, (IDS.to("meta"),), capture=tracer.CaptureOptions(structure_only=True))
    d = tracer.diff(base, shadow)
    assert not d.values_compared and d.divergences == ()
    assert "structure diff only" in d.values_note and "side b" in d.values_note
    assert d.b.structure_only and d.b.ladder_state == "HYPOTHESIS" and d.a.ladder_state == "OBSERVED"
    assert not d.added_ops and not d.removed_ops
    assert "structure diff only" in d.to_text()


def test_tolerance_rejudges_without_recomputing(gpt2, base):
    planted = copy.deepcopy(gpt2)
    with torch.no_grad():
        planted.transformer.h[1].ln_1.weight.mul_(1.0 + 1e-4)
    d = tracer.diff(base, tracer.trace(planted, (IDS,)))
    assert d.first_divergence is None  # a 1e-4 change is inside the default tolerance (rtol 1e-3)
    tight = d.with_tolerance(rtol=1e-6, atol=0.0)
    assert tight.first_divergence is not None and tight.first_divergence.module == "transformer.h.1.ln_1"
    assert tight.divergences is d.divergences
    with pytest.raises(DiffInputError):
        d.with_tolerance(rtol=-1.0)


def test_bad_inputs_are_typed(base):
    with pytest.raises(DiffInputError) as err:
        tracer.diff(base, "not a trace")
    assert err.value.code == "diff_input_invalid"
    with pytest.raises(DiffInputError):
        tracer.diff(base, base, rtol=float("nan"))
    with pytest.raises(DiffInputError):
        tracer.diff(base, base, atol="1")


def test_json_and_save_load_roundtrip(gpt2, base, tmp_path):
    planted = copy.deepcopy(gpt2)
    with torch.no_grad():
        planted.transformer.h[1].ln_1.weight.mul_(2.0)
    d = tracer.diff(base, tracer.trace(planted, (IDS,)))
    data = json.loads(d.to_json())
    assert data["first_divergence"]["label_a"] == d.first_divergence.label_a
    assert data["rollups"]["transformer.h.1"]["ops_diverged"] > 0
    path = d.save(tmp_path / "d.json")
    back = tracer.load_diff(path)
    assert back == d and back.first_divergence == d.first_divergence
    assert back.to_text() == d.to_text()
    d.save(path)  # an earlier diff may be replaced


def test_saved_diff_refuses_tampering_and_junk(base, tmp_path):
    d = tracer.diff(base, base)
    path = d.save(tmp_path / "d.json")
    doc = json.loads(path.read_text())
    doc["diff"]["tolerance"]["rtol"] = 0.5
    path.write_text(json.dumps(doc))
    with pytest.raises(DiffFileTamperedError):
        tracer.load_diff(path)
    junk = tmp_path / "junk.json"
    junk.write_text('{"format": "something else"}')
    with pytest.raises(DiffSchemaError):
        tracer.load_diff(junk)
    junk.write_text('{"format": "torchlens-explore.diff", "sch')
    with pytest.raises(DiffFileCorruptError):
        tracer.load_diff(junk)
    with pytest.raises(DiffFileNotFoundError):
        tracer.load_diff(tmp_path / "nope.json")
    with pytest.raises(DiffFileNotFoundError):
        tracer.load_diff(None)
    other = tmp_path / "notes.json"
    other.write_text("{}")
    with pytest.raises(DiffSavePathError):
        d.save(other)  # a file that is not a diff is left alone
    assert other.read_text() == "{}"
    with pytest.raises(DiffSavePathError):
        d.save(tmp_path / "d.txt")


def test_saved_diff_with_a_bad_record_refuses_even_when_resealed(base, tmp_path):
    from tracer.digest import canonical_digest

    d = tracer.diff(base, base)
    path = d.save(tmp_path / "d.json")
    doc = json.loads(path.read_text())
    doc["diff"]["divergences"][0]["rel_l2"] = -1.0  # out of bounds
    doc["digest"] = canonical_digest(doc["diff"])
    path.write_text(json.dumps(doc))
    with pytest.raises(DiffFileCorruptError):
        tracer.load_diff(path)
    doc = json.loads(d.save(tmp_path / "e.json").read_text())
    doc["diff"]["modules"][""]["children"].append("ghost")
    doc["digest"] = canonical_digest(doc["diff"])
    (tmp_path / "e.json").write_text(json.dumps(doc))
    with pytest.raises(DiffFileCorruptError):
        tracer.load_diff(tmp_path / "e.json")


def test_distance_counts_non_finite_and_measures_the_rest():
    from tracer.differ.numeric import distance

    a = torch.tensor([1.0, float("nan"), 3.0, float("inf")])
    b = torch.tensor([1.0, 2.0, 3.5, float("inf")])
    max_abs, rel, cos, bad_a, bad_b = distance(a, b)
    assert (bad_a, bad_b) == (2, 1) and max_abs == pytest.approx(0.5) and 0 < rel < 1 and 0.99 < cos <= 1
    assert distance(torch.zeros(3), torch.zeros(3))[1:3] == (0.0, 1.0)
    assert distance(torch.zeros(3), torch.ones(3))[1:3] == (1.0, 0.0)


def test_every_truncation_and_byte_flip_of_a_saved_diff_refuses_typed(base, tmp_path):
    from tracer.errors import StoreError

    raw = tracer.diff(base, base).save(tmp_path / "d.json").read_bytes()
    bad = tmp_path / "bad.json"
    cuts = sorted({1, 10, 40, 80, len(raw) // 3, len(raw) // 2, len(raw) - 2, len(raw) - 1})
    flips = range(0, len(raw), max(1, len(raw) // 40))
    cases = [raw[:n] for n in cuts] + [raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:] for i in flips]
    refused = 0
    for data in cases:
        bad.write_bytes(data)
        try:
            tracer.load_diff(bad)
        except StoreError:
            refused += 1
    assert refused == len(cases)  # nothing loads, and nothing untyped escapes
