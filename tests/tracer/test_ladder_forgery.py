"""Only a discharge raises the ladder: every other way of making a trace read CORROBORATED (or REFUTED) fails.

Each test tries one forgery path on real small models (weights-free twins discharged against real
captures) and checks that nothing believes it: the trace's state, its repr, `require_corroborated`,
`with_envelope`, the banner, the Model Explorer label, save and load.
"""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2
from tests.tracer.test_claims import IDS, SO, meta_twin, pair
from tracer import claims, errors, store
from tracer.claims.envelope import EvidenceEnvelope
from tracer.digest import canonical_digest


class Six(nn.Module):
    """input, linear, relu (or `act`), linear, tanh, output: six ops."""

    def __init__(self, width: int = 4, act=torch.relu) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(width, width), nn.Linear(width, width)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.b(self.act(self.a(x))))


def six_twin(act=torch.relu):
    """(the weights-free trace of a meta Six with `act`, its input)."""
    with torch.device("meta"):
        twin = Six(act=act).eval()
    return tracer.trace(twin, (torch.empty(2, 4, device="meta"),), capture=SO)


def six_pair(act=torch.relu):
    """(weights-free trace of a meta twin of Six with `act`, real trace of Six with relu)."""
    torch.manual_seed(0)
    real = Six().eval()
    return six_twin(act), tracer.trace(real, (torch.randn(2, 4),))


@pytest.fixture(scope="module")
def six():
    st, rt = six_pair()
    assert len(st) == 6 and st.ladder_state == "HYPOTHESIS"
    result = st.discharge_against(rt)
    assert result.state == "CORROBORATED"
    return st, rt, result


@pytest.fixture(scope="module")
def refuted():
    st, rt = six_pair(torch.sigmoid)  # the twin claims a sigmoid where the real model computes a relu
    result = st.discharge_against(rt)
    assert result.state == "REFUTED"
    return st, rt, result


@pytest.fixture(scope="module")
def gpt2():
    st, rt = pair(tiny_gpt2, IDS)
    result = st.discharge_against(rt)
    assert result.state == "CORROBORATED"
    return st, rt, result


def _not_believed(trace) -> None:
    """Nothing that reads the ladder believes a state above HYPOTHESIS on `trace`."""
    from app.ladder import ladder_view
    from exporters.model_explorer.payload import to_graph_collection

    assert trace.ladder_state == "HYPOTHESIS" and "HYPOTHESIS" in repr(trace)
    assert claims.believed_state(trace, fresh=True) == "HYPOTHESIS"
    with pytest.raises(errors.NotCorroboratedError):
        claims.require_corroborated(trace, "a corroborated export")
    assert ladder_view(trace).state == "HYPOTHESIS"
    assert to_graph_collection(trace)["label"].endswith("HYPOTHESIS")


def _fields(envelope, **changes):
    return {**{f.name: getattr(envelope, f.name) for f in dataclasses.fields(envelope)}, **changes}


def _resealed(envelope, **changes) -> EvidenceEnvelope:
    """A new envelope with `changes` whose `digest` is made right (canonical), as a forger would make it."""
    d = {**envelope.to_dict(), **changes}
    d["digest"] = canonical_digest({k: v for k, v in d.items() if k != "digest"})
    return EvidenceEnvelope(**d)


# -- the discharge path itself ----------------------------------------------------------------
def test_discharge_mints_a_state_believed_for_its_own_trace(six, refuted):
    st, _, result = six
    done = st.with_envelope(result.envelope)
    assert done.ladder_state == "CORROBORATED" and "CORROBORATED" in repr(done)
    assert "CORROBORATED; digest" in repr(done.envelope)  # believed: no disclaimer
    claims.require_corroborated(done, "anything")
    st_r, _, result_r = refuted
    assert st_r.with_envelope(result_r.envelope).ladder_state == "REFUTED"


# -- another trace's envelope ---------------------------------------------------------------------
def test_another_models_discharge_envelope_is_refused_and_not_believed(six, gpt2):
    st, _, _ = six
    _, _, other = gpt2  # a tiny GPT-2 discharged against its real twin
    with pytest.raises(errors.EnvelopeBoundElsewhereError) as info:
        st.with_envelope(other.envelope)
    assert info.value.code == "envelope_bound_to_other_trace" and info.value.findings["trace_counts"]["ops"] == 6
    _not_believed(dataclasses.replace(st, envelope=other.envelope))  # around with_envelope: still not believed
    assigned = st.with_envelope(st.envelope)
    assigned.envelope = other.envelope  # a Trace is a plain object: its attribute can be set
    _not_believed(assigned)


def test_a_discharge_of_the_other_twin_does_not_raise_a_refuted_trace(six, refuted):
    st_r, _, result_r = refuted
    _, _, good = six  # the relu twin's CORROBORATED envelope: other claims than the sigmoid trace's
    with pytest.raises(errors.EnvelopeBoundElsewhereError):
        st_r.with_envelope(good.envelope)
    forged = st_r.with_envelope(result_r.envelope)
    forged.envelope = good.envelope
    _not_believed(forged)


# -- evolve -------------------------------------------------------------------------------
@pytest.mark.parametrize("changes", [{"ladder_state": "CORROBORATED"}, {"ladder_state": "REFUTED"},
                                     {"discharge": {"state": "CORROBORATED"}}, {"claims": {"ops": [], "params": [], "modules": []}},
                                     {"claim_digests": {}}, {"history": []}, {"digest": "0" * 64}])
def test_evolve_cannot_change_the_ladder_or_what_a_discharge_wrote(six, changes):
    st, _, _ = six
    with pytest.raises(errors.EnvelopeFieldLockedError) as info:
        st.envelope.evolve("discharged", **changes)
    assert info.value.code == "envelope_field_locked" and st.ladder_state == "HYPOTHESIS"


def test_a_discharged_envelope_takes_plan_audits_and_nothing_else(six):
    st, _, result = six
    done = st.with_envelope(result.envelope)
    audit = done.check_plan([("a", torch.empty(2, 4, device="meta"))])
    kept = done.with_envelope(claims.plan_checked(done.envelope, audit))
    assert kept.ladder_state == "CORROBORATED" and kept.envelope.plan_checks[-1]["ok"]
    with pytest.raises(errors.EnvelopeFieldLockedError):
        done.envelope.evolve("retwinned", twin={"config_fingerprint": "another"})
    with pytest.raises(errors.InvalidInputError):
        done.envelope.evolve("x", no_such_field=1)


# -- building envelopes outside discharge -----------------------------------------------------------
def test_an_envelope_constructed_with_corroborated_is_refused(six):
    st, _, _ = six
    made = _resealed(st.envelope, ladder_state="CORROBORATED")  # a consistent digest, but no discharge minted it
    assert claims.join.table_digests(made.to_dict()["claims"]) == dict(made.claim_digests)
    with pytest.raises(errors.EnvelopeNotMintedError) as info:
        st.with_envelope(made)
    assert info.value.code == "envelope_not_minted"
    plain = EvidenceEnvelope(**_fields(st.envelope, ladder_state="CORROBORATED"))  # its digest is the old one
    with pytest.raises(errors.EnvelopeNotMintedError):
        st.with_envelope(plain)
    assert "not believed" in repr(made) and "not believed" not in repr(st.envelope)
    for forged in (made, plain):
        t = st.with_envelope(st.envelope)
        t.envelope = forged
        _not_believed(t)


def test_dataclasses_replace_and_setattr_on_a_frozen_envelope_do_not_promote(six):
    st, _, _ = six
    with pytest.raises(errors.EnvelopeNotMintedError):
        st.with_envelope(dataclasses.replace(st.envelope, ladder_state="CORROBORATED"))
    own = st.with_envelope(st.envelope)
    own.envelope = dataclasses.replace(st.envelope, ladder_state="CORROBORATED")
    _not_believed(own)

    # A REFUTED envelope minted for its trace, flipped in place to CORROBORATED (digest made right too).
    twin, real = six_pair(torch.sigmoid)
    minted = twin.discharge_against(real).envelope
    flipped = twin.with_envelope(minted)
    assert flipped.ladder_state == "REFUTED"
    object.__setattr__(minted, "ladder_state", "CORROBORATED")
    assert flipped.ladder_state == "HYPOTHESIS"  # the state read is no longer the one minted: not believed
    object.__setattr__(minted, "discharge", {**minted.discharge, "state": "CORROBORATED", "contradiction": None})
    d = minted.to_dict()
    object.__setattr__(minted, "digest", canonical_digest({k: v for k, v in d.items() if k != "digest"}))
    _not_believed(flipped)
    with pytest.raises(errors.EnvelopeNotMintedError):
        twin.with_envelope(minted)


def test_copying_a_sealed_envelopes_fields_or_its_seal_does_not_carry_the_state(six, refuted):
    st, _, result = six
    copied = EvidenceEnvelope(**_fields(result.envelope))  # the same fields, made by the constructor
    with pytest.raises(errors.EnvelopeNotMintedError):
        st.with_envelope(copied)
    t = st.with_envelope(st.envelope)
    t.envelope = copied
    _not_believed(t)
    # The seal attribute copied onto an envelope that says something else (REFUTED made CORROBORATED).
    st_r, _, result_r = refuted
    changed = _resealed(result_r.envelope, ladder_state="CORROBORATED",
                        discharge={**result_r.envelope.to_dict()["discharge"], "state": "CORROBORATED",
                                   "contradiction": None})
    for seal_from in (result_r.envelope, result.envelope):
        object.__setattr__(changed, "_discharge_seal", getattr(seal_from, "_discharge_seal"))
        with pytest.raises(errors.EnvelopeNotMintedError):
            st_r.with_envelope(changed)
        r = st_r.with_envelope(st_r.envelope)
        r.envelope = changed
        _not_believed(r)


def test_an_envelope_claiming_3_ops_of_a_6_op_trace_is_refused_everywhere(six, tmp_path):
    st, _, _ = six
    d = st.envelope.to_dict()
    d["claims"]["ops"] = d["claims"]["ops"][:3]
    d["claim_digests"] = claims.join.table_digests(d["claims"])
    short = _resealed(st.envelope, claims=d["claims"], claim_digests=d["claim_digests"])
    assert short.counts["ops"] == 3
    with pytest.raises(errors.EnvelopeBoundElsewhereError) as info:
        st.with_envelope(short)
    assert info.value.findings["envelope_counts"]["ops"] == 3 and info.value.findings["trace_counts"]["ops"] == 6
    t = st.with_envelope(st.envelope)
    t.envelope = short
    with pytest.raises(errors.EnvelopeBoundElsewhereError):
        t.save(tmp_path / "short")  # saving it is refused too, and nothing is written
    assert not (tmp_path / "short").exists()


# -- saved files ---------------------------------------------------------------------------------
def _edit_saved(folder, edit) -> None:
    """Edit the saved envelope with `edit(envelope_dict)`, redo its digest and the file's structure digest."""
    path = folder / "trace.json"
    doc = json.loads(path.read_text())
    env = doc["trace"]["envelope"]
    edit(env)
    env["digest"] = canonical_digest({k: v for k, v in env.items() if k != "digest"})
    doc["digest"]["structure"] = store._digest(doc["trace"])
    path.write_text(json.dumps(doc))


def test_a_saved_corroborated_trace_loads_as_hypothesis_and_says_what_its_file_claimed(six, tmp_path):
    from app.ladder import ladder_view

    st, rt, result = six
    folder = st.with_envelope(result.envelope).save(tmp_path / "t")
    back = tracer.load(folder)
    _not_believed(back)
    assert claims.state_when_saved(back.envelope)["state"] == "CORROBORATED"
    assert "was CORROBORATED when saved" in ladder_view(back).detail and "not re-verified" in ladder_view(back).detail
    again = back.discharge_against(rt)  # re-derived honestly, in this process
    assert back.with_envelope(again.envelope).ladder_state == "CORROBORATED"


def test_an_edited_and_resealed_file_does_not_promote(six, tmp_path):
    st, _, result = six
    folder = st.save(tmp_path / "t")  # HYPOTHESIS when saved

    def promote(env):
        env["ladder_state"] = "CORROBORATED"
        env["discharge"] = dict(result.envelope.to_dict()["discharge"])
        env["history"].append({"event": "discharged", "at": "2026-01-01T00:00:00Z", "ladder_state": "CORROBORATED"})

    _edit_saved(folder, promote)
    back = tracer.load(folder)  # every digest is consistent: the file loads, reset to HYPOTHESIS
    _not_believed(back)
    assert back.envelope.discharge is None


def test_a_resealed_file_whose_claims_are_not_its_records_is_refused(six, tmp_path):
    st, _, _ = six
    folder = st.save(tmp_path / "t")

    def shorten(env):
        env["claims"]["ops"] = env["claims"]["ops"][:3]
        env["claim_digests"] = claims.join.table_digests(env["claims"])

    _edit_saved(folder, shorten)
    with pytest.raises(errors.EnvelopeClaimsMismatchError) as info:
        tracer.load(folder)
    assert info.value.code == "envelope_claims_mismatch" and isinstance(info.value, errors.EnvelopeTamperedError)
    assert info.value.findings["claimed_counts"]["ops"] == 3 and info.value.findings["record_counts"]["ops"] == 6

    folder = st.save(tmp_path / "u")

    def retype(env):  # same count, one claimed dtype changed
        env["claims"]["ops"][2][6] = "float16"
        env["claim_digests"] = claims.join.table_digests(env["claims"])

    _edit_saved(folder, retype)
    with pytest.raises(errors.EnvelopeClaimsMismatchError) as info:
        tracer.load(folder)
    assert "ops[2]" in info.value.message


def test_a_structure_only_trace_cannot_drop_its_envelope_to_read_observed(six):
    st, _, _ = six
    with pytest.raises(errors.EnvelopeNotMintedError):
        st.with_envelope(None)
    bare = dataclasses.replace(st, envelope=None)
    assert bare.ladder_state == "HYPOTHESIS"


# -- REFUTED reaches every hypothesis-tolerant consumer ---------------------------------------------
def test_check_plan_on_a_refuted_trace_is_not_ok_and_names_the_contradiction(refuted):
    st, _, result = refuted
    done = st.with_envelope(result.envelope)
    plan = [("a", torch.empty(2, 4, device="meta"))]
    assert st.check_plan(plan).ok  # the same plan fits the shapes while they are a hypothesis
    report = done.check_plan(plan)
    assert report.entries[0].status == "fits" and not report.ok
    assert report.ladder_state == "REFUTED" and f"ops[{result.contradiction['position']}]" in report.refuted
    assert "REFUTED" in str(report) and report.to_dict()["refuted"] == report.refuted
    from tracer.claims.plan import intervention_sites

    assert {row["claim_state"] for row in intervention_sites(done)} == {"REFUTED"}


def test_a_plan_on_a_trace_saved_refuted_says_so(refuted, tmp_path):
    st, _, result = refuted
    back = tracer.load(st.with_envelope(result.envelope).save(tmp_path / "r"))
    report = back.check_plan([("a", torch.empty(2, 4, device="meta"))])
    assert back.ladder_state == "HYPOTHESIS" and not report.ok and "REFUTED when saved" in report.refuted


def test_exports_figures_and_the_html_file_carry_refuted(refuted, tmp_path):
    from exporters.figures import export_svg
    from exporters.model_explorer.payload import to_graph_collection

    st, _, result = refuted
    done = st.with_envelope(result.envelope)
    payload = to_graph_collection(done)
    graph = payload["graphs"][0]
    assert "REFUTED" in payload["label"] and "REFUTED" in graph["id"]
    assert graph["groupNodeAttributes"][""]["ladder_state"] == "REFUTED"
    svg = export_svg(done, tmp_path / "f.svg").read_text()
    assert "REFUTED" in svg and "contradicted" in svg
    text = done.to_html(tmp_path / "p.html").read_text()
    assert "[REFUTED] · torchlens-explore</title>" in text  # in the file itself, not only in its packed data
    data = _page_data(text)
    assert data["ladder"] == "REFUTED" and "contradicted" in data["banner"]
    # the same exports of the unrefuted hypothesis do not say REFUTED
    assert "REFUTED" not in to_graph_collection(st)["label"] and "REFUTED" not in export_svg(st, tmp_path / "h.svg").read_text()


def _page_data(text: str) -> dict:
    """The HTML page's packed data (gzip-compressed JSON in base64), as the browser unpacks it."""
    import base64
    import gzip
    import re

    packed = re.search(r'<script id="tlx-data" type="application/octet-stream">([^<]*)</script>', text).group(1)
    return json.loads(gzip.decompress(base64.b64decode(packed)))


def test_the_backward_graph_of_a_weights_free_trace_carries_its_own_hypothesis():
    """The backward graph's envelope claims its own ops (it carried the forward's, bound to another trace)."""
    from tracer.backward.graph import backward_trace

    with torch.device("meta"):
        model = Six().train()
    st = tracer.trace(model, (torch.empty(2, 4, device="meta"),),
                      capture=tracer.CaptureOptions(structure_only=True, backward=True))
    graph = backward_trace(st)
    assert graph.ladder_state == "HYPOTHESIS" and graph.envelope.counts["ops"] == len(graph) != len(st)
    assert graph.with_envelope(graph.envelope).envelope is graph.envelope
    with pytest.raises(errors.EnvelopeBoundElsewhereError):
        graph.with_envelope(st.envelope)
