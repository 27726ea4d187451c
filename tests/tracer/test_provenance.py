"""The trace is built once: a typed, frozen Provenance; reports are returned, never written into the trace."""
from __future__ import annotations

import ast
import dataclasses
import json
import pathlib

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer import claims, errors
from tracer.provenance import Provenance

IDS = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0))
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _meta_twin(real):
    with torch.device("meta"):
        return type(real)(real.config).eval()


def test_provenance_is_typed_frozen_and_reads_like_the_saved_json():
    t = tracer.trace(tiny_gpt2().eval(), (IDS,))
    p = t.provenance
    assert isinstance(p, Provenance)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.verified = False  # type: ignore[misc]
    assert p.model_class == "GPT2LMHeadModel" and p.structure_only is False and p.verified is True
    assert p.admission == {"mode": "eager"} and p.twin["model_class"] == "GPT2LMHeadModel"
    assert p.capture_seconds > 0 and p.versions["torch"] == torch.__version__
    assert p["twin"] is p.twin and p.get("witness") is None and "witness" not in p  # unset reads as absent
    assert set(p) == set(p.to_dict()) and json.loads(json.dumps(p.to_dict())) == p.to_dict()
    assert Provenance.from_dict(p.to_dict()) == p


def test_from_dict_refuses_unknown_and_mistyped_fields_and_drops_legacy_reports():
    base = {"model_class": "M", "structure_only": False}
    assert Provenance.from_dict({**base, "validation": {"passed": True}, "plan_checks": []}) == Provenance(model_class="M")
    with pytest.raises(ValueError, match="unknown provenance field"):
        Provenance.from_dict({**base, "anything": 1})
    for key, bad in [("verified", "no"), ("unverified_ops", "a"), ("twin", [1]), ("capture_seconds", "1")]:
        with pytest.raises(TypeError):
            Provenance.from_dict({**base, key: bad})


def test_a_tampered_provenance_in_a_saved_file_refuses_typed(tmp_path):
    from tracer import store

    t = tracer.trace(tiny_gpt2().eval(), (IDS,), capture=tracer.CaptureOptions(save="none"))
    folder = store.save_trace(t, tmp_path / "t")
    assert tracer.load(str(folder)).provenance == t.provenance
    doc = json.loads((folder / "trace.json").read_text())
    doc["trace"]["provenance"]["verified"] = "yes"
    doc["digest"]["structure"] = store._digest(doc["trace"])
    (folder / "trace.json").write_text(json.dumps(doc))
    with pytest.raises(errors.TraceFileCorruptError):
        tracer.load(str(folder))


def test_validate_check_plan_and_discharge_change_no_trace():
    real = tiny_gpt2().eval()
    rt = tracer.trace(real, (IDS,))
    before = (rt.provenance, rt.warnings, rt.envelope)
    report = tracer.validate(rt)
    assert report and report.passed and report.ops_total == len(rt)
    assert (rt.provenance, rt.warnings, rt.envelope) == before and rt.provenance is before[0]

    st = tracer.trace(_meta_twin(real), (IDS.to("meta"),), capture=tracer.CaptureOptions(structure_only=True))
    env = st.envelope
    audit = st.check_plan([("transformer.h.0.mlp", torch.empty(1, 8, 32, device="meta"))])
    assert audit.entries[0].status == "fits" and st.envelope is env
    result = st.discharge_against(rt)
    assert st.envelope is env and st.ladder_state == "HYPOTHESIS"
    assert result.envelope is not None and result.envelope.ladder_state == "CORROBORATED"
    done = st.with_envelope(result.envelope)
    assert done.ladder_state == "CORROBORATED" and done is not st and done.ops is st.ops
    kept = st.with_envelope(claims.plan_checked(env, audit))
    assert kept.envelope.plan_checks[0]["entries"][0]["status"] == "fits" and not env.plan_checks


def test_with_provenance_makes_a_new_trace():
    t = tracer.trace(tiny_gpt2().eval(), (IDS,), capture=tracer.CaptureOptions(save="none"))
    tagged = t.with_provenance(config_source="gpt2")
    assert tagged.provenance.config_source == "gpt2" and t.provenance.config_source is None
    assert tagged.ops is t.ops and tagged["linear_1" if "linear_1" in t else t.ops[1].label]


def test_ir_imports_nothing_of_claims_store_or_module_tree_at_module_level():
    tree = ast.parse((ROOT / "tracer" / "ir.py").read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = {(node.module or "") for node in top if isinstance(node, ast.ImportFrom)}
    names |= {alias.name for node in top if isinstance(node, ast.Import) for alias in node.names}
    assert not {n for n in names if n.split(".")[0] in ("claims", "store", "module_tree")
                or n.startswith(("tracer.claims", "tracer.store", "tracer.module_tree"))}
    assert names <= {"__future__", "math", "collections", "dataclasses", "typing", "provenance"}
