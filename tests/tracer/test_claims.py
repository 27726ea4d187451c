"""The claim ladder: discharge of meta twins against real captures, preflight refusals, the envelope."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_bert, tiny_gpt2, tiny_llama, tiny_resnet
from tracer import claims, errors

SO = tracer.CaptureOptions(structure_only=True)


def meta_twin(real: nn.Module) -> nn.Module:
    with torch.device("meta"):
        twin = type(real)(real.config)
    return twin.eval()


def pair(factory, x, **kwargs):
    """(structure-only trace of the meta twin, real trace) on the same input plan."""
    real = factory()
    meta_kwargs = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    st = tracer.trace(meta_twin(real), (x.to("meta"),), meta_kwargs, capture=SO)
    rt = tracer.trace(real, (x,), kwargs)
    return st, rt


IDS = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("factory,x", [(tiny_gpt2, IDS), (tiny_bert, IDS), (tiny_resnet, torch.randn(1, 3, 32, 32)),
                                       (tiny_llama, IDS)])
def test_meta_twin_discharges_corroborated(factory, x):
    st, rt = pair(factory, x)
    assert st.ladder_state == "HYPOTHESIS"
    assert len(st) == len(rt) and len(st.params) == len(rt.params) and len(st.modules) == len(rt.modules)
    result = st.discharge_against(rt)
    assert result.state == "CORROBORATED" and result.contradiction is None
    assert dict(result.claimed_counts) == dict(result.observed_counts) == {
        "ops": len(rt), "params": len(rt.params), "modules": len(rt.modules)}
    assert st.ladder_state == "HYPOTHESIS"  # discharge changes no trace: it returns the new envelope
    done = st.with_envelope(result.envelope)
    assert done.ladder_state == "CORROBORATED" and "CORROBORATED" in repr(done)
    assert done.envelope.discharge["state"] == "CORROBORATED" and done.envelope.digest == result.envelope_digest
    assert [h["event"] for h in done.envelope.history] == ["sealed", "discharged"]
    assert done.ops is st.ops and done.provenance is st.provenance  # the graph is shared, not copied


def test_other_dtype_twin_is_refuted_at_the_first_dtype_difference():
    real = tiny_gpt2()
    st = tracer.trace(meta_twin(real).to(torch.bfloat16), (IDS.to("meta"),), capture=SO)
    rt = tracer.trace(real, (IDS,))
    result = st.discharge_against(rt)
    first_float = next(op.index for op in rt.ops if op.out is not None and op.out.dtype == "float32")
    c = result.contradiction
    assert result.state == "REFUTED" and st.with_envelope(result.envelope).ladder_state == "REFUTED"
    assert c["table"] == "ops" and c["position"] == first_float
    assert (c["field"], c["claimed"], c["observed"]) == ("dtype", "bfloat16", "float32")
    assert "REFUTED at ops[" in str(result)


def test_one_changed_layer_is_refuted_at_that_layer():
    real = tiny_gpt2()
    twin = meta_twin(real)
    twin.transformer.h[1].mlp.act = nn.ReLU().eval()  # one layer differs from the real model
    st = tracer.trace(twin, (IDS.to("meta"),), capture=SO)
    rt = tracer.trace(real, (IDS,))
    result = st.discharge_against(rt)
    expected = next(op.index for op in rt.ops if op.module == "transformer.h.1.mlp.act")
    c = result.contradiction
    assert result.state == "REFUTED"
    assert c["table"] == "ops" and c["position"] == expected
    assert c["claimed_count"] == len(st) and c["observed_count"] == len(rt) and len(st) != len(rt)
    assert c["reason"] == "record counts differ" and c["field"] in ("kind", "func")
    assert c["claimed_row"][1] == "relu"
    # the contradiction reads as JSON does (lists), though the claim rows it came from are tuples
    assert type(c["claimed_row"]) is list and type(c["observed_row"][4]) is list
    assert c == json.loads(json.dumps(c))


def _refusal_changes_nothing(st, rt):
    before = st.envelope
    with pytest.raises(errors.DischargePreflightError) as info:
        st.discharge_against(rt)
    assert st.envelope is before and st.ladder_state == "HYPOTHESIS"
    assert info.value.code == "twins_not_comparable"
    return info.value


def test_mismatched_config_refuses():
    st = tracer.trace(meta_twin(tiny_gpt2(n_layer=2)), (IDS.to("meta"),), capture=SO)
    rt = tracer.trace(tiny_gpt2(n_layer=3), (IDS,))
    err = _refusal_changes_nothing(st, rt)
    assert [m["field"] for m in err.findings["mismatches"]] == ["config_fingerprint"]
    assert "config_fingerprint" in err.message


def test_a_config_fingerprint_follows_every_change_to_its_config():
    """The fingerprint kept per config object is made anew when an attribute changes (in place too), and
    equals a fresh config's with the same values."""
    from tracer.claims.twin import config_fingerprint

    config = tiny_gpt2(n_layer=2).config
    first = config_fingerprint(config)
    assert config_fingerprint(config) == first
    config.n_layer = 3
    changed = config_fingerprint(config)
    assert changed != first and changed == config_fingerprint(tiny_gpt2(n_layer=3).config)
    config.task_specific_params = {"a": [1, 2]}
    nested = config_fingerprint(config)
    config.task_specific_params["a"].append(3)  # a change inside a nested value
    assert config_fingerprint(config) not in (nested, changed)
    config.task_specific_params["a"].pop()
    assert config_fingerprint(config) == nested


def test_train_eval_mismatch_names_the_module():
    real = tiny_gpt2()
    twin = meta_twin(real)
    real.transformer.h[0].attn.train()
    st = tracer.trace(twin, (IDS.to("meta"),), capture=SO)
    rt = tracer.trace(real, (IDS,))
    err = _refusal_changes_nothing(st, rt)
    [m] = err.findings["mismatches"]
    assert m == {"field": "training", "module": "transformer.h.0.attn", "structure": "eval", "real": "train"}


def test_input_shape_cache_and_mask_mismatches_refuse():
    st = tracer.trace(meta_twin(tiny_gpt2()), (IDS.to("meta"),), capture=SO)
    real = tiny_gpt2()
    longer = tracer.trace(real, (torch.randint(0, 100, (1, 9)),))
    assert [m["field"] for m in _refusal_changes_nothing(st, longer).findings["mismatches"]] == ["inputs"]
    no_cache = tracer.trace(real, (IDS,), {"use_cache": False})
    assert [m["field"] for m in _refusal_changes_nothing(st, no_cache).findings["mismatches"]] == ["use_cache"]
    masked = tracer.trace(real, (IDS,), {"attention_mask": torch.ones(1, 8, dtype=torch.long)})
    fields = [m["field"] for m in _refusal_changes_nothing(st, masked).findings["mismatches"]]
    assert "attention_mask" in fields


def test_version_mismatch_refuses():
    st, rt = pair(tiny_gpt2, IDS)
    twin = {**rt.provenance.twin, "versions": {**rt.provenance.twin["versions"], "transformers": "4.0.0"}}
    rt = rt.with_provenance(twin=twin)  # a real capture made under another version
    err = _refusal_changes_nothing(st, rt)
    assert err.findings["mismatches"] == [{"field": "versions.transformers",
                                           "structure": st.envelope.twin["versions"]["transformers"], "real": "4.0.0"}]


def test_discharge_needs_a_structure_trace_and_a_real_one():
    st, rt = pair(tiny_gpt2, IDS)
    with pytest.raises(errors.NotStructureOnlyError):
        rt.discharge_against(rt)
    other = tracer.trace(meta_twin(tiny_gpt2()), (IDS.to("meta"),), capture=SO)
    _refusal_changes_nothing(st, other)


# -- the envelope --------------------------------------------------------------------------
def test_envelope_is_immutable_and_sealed():
    st, _ = pair(tiny_gpt2, IDS)
    env = st.envelope
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.ladder_state = "CORROBORATED"
    with pytest.raises(TypeError):
        env.twin["use_cache"] = False
    assert isinstance(env.claims["ops"], tuple)
    d = env.to_dict()
    json.dumps(d)  # JSON-able
    assert (d["mode"], d["substrate"], d["values_available"], d["outcome"]) == ("structure_only", "meta", False, "captured")
    assert d["input_plan"]["inputs"] == [["args.0", [1, 8], "int64", "meta"]]
    assert len(d["claims"]["ops"]) == len(st) and d["ladder_state"] == "HYPOTHESIS"


def test_sealed_digests_are_those_of_the_canonical_json():
    """Sealing encodes the claim tables once and reuses their text: the digests are still the canonical ones."""
    from tracer.digest import canonical_digest

    st, _ = pair(tiny_llama, IDS)
    d = st.envelope.to_dict()
    assert d["claim_digests"] == claims.join.table_digests(d["claims"])
    assert d["digest"] == canonical_digest({k: v for k, v in d.items() if k != "digest"})


def test_evolved_and_loaded_envelopes_keep_the_claims_and_canonical_digests():
    """Evolving reuses the sealed claims and their text (not encoded again); every digest is still the canonical one,
    also for an envelope made outside sealing (dataclasses.replace keeps no text)."""
    from tracer.digest import canonical_digest

    st, rt = pair(tiny_llama, IDS)
    env = st.envelope
    checked = [env.evolve("plan_checked", plan_checks=[{"ok": True}]), st.discharge_against(rt).envelope,
               claims.envelope_from_dict(env.to_dict()), dataclasses.replace(env, outcome="captured").evolve("again")]
    for new in checked:
        d = new.to_dict()
        assert d["digest"] == canonical_digest({k: v for k, v in d.items() if k != "digest"})
        assert d["claims"] == env.to_dict()["claims"] and new.claims == env.claims
    assert checked[0].claims is env.claims and checked[1].claims is env.claims  # shared, frozen
    assert checked[2].evolve("x").claims is checked[2].claims


def test_rows_json_is_the_canonical_json_of_the_8b_claim_table():
    """Sealing encodes claim tables with msgspec: byte for byte the canonical (json module) text."""
    from tracer.bridges.transformers import build_meta_model, load_config, trace_ids
    from tracer.digest import canonical_json, canonical_rows_json

    with torch.no_grad():
        st = trace_ids(build_meta_model(load_config("llama-3.1-8b")), (1, 8))
    table = claims.join.claim_table(st)
    assert {name: len(rows) for name, rows in table.items()} == st.envelope.counts and len(table["ops"]) > 1000
    for name, rows in table.items():
        text = canonical_rows_json(rows)
        assert text == canonical_json(rows) == canonical_json(json.loads(text))
    assert dict(st.envelope.claims) == table  # sealed as built: frozen rows, nothing copied
    stack = list(st.envelope.claims.values())  # read-only all the way down: tuples and leaves only
    while stack:
        item = stack.pop()
        assert type(item) in (tuple, str, int, bool, type(None)), type(item)
        if type(item) is tuple:
            stack.extend(item)


@pytest.mark.parametrize("value", [
    [["a", 1, None, True, False, -3, 2**70, -(2**64)], (), [], {}],
    {"b": [1, {"d": 2, "c": [3]}], "a": None, "B": "x", "aa": 1, "a a": 2, "_": 3, "~": 4},
    ["quote \" and backslash \\", "slash /", "tab\t nl\n cr\r", "\x00\x1f\x7f"],
    ["".join(map(chr, range(128))), {chr(i) * 2: i for i in range(128)}],  # every ASCII character, in keys too
    ["non-ASCII: é", "日本", "\u2028", "\U0001F600"], {"é": 1, "e": 2}, {"key\u00ff": [1]},  # json escapes these
    [type("Text", (str,), {})("a str subclass")], [type("Count", (int,), {})(5)],  # msgspec refuses: json's text
])
def test_rows_json_equals_canonical_json_on_edge_values(value):
    from tracer.digest import canonical_json, canonical_rows_json

    assert canonical_rows_json(value) == canonical_json(value)


def test_envelope_from_dict_verifies_the_digest_and_resets_to_hypothesis():
    st, rt = pair(tiny_gpt2, IDS)
    st = st.with_envelope(st.discharge_against(rt).envelope)
    d = st.envelope.to_dict()
    loaded = claims.envelope_from_dict(d)
    assert loaded.ladder_state == "HYPOTHESIS" and loaded.discharge is None
    assert loaded.claims == st.envelope.claims and loaded.history[-1]["event"] == "loaded"
    for key, value in [("ladder_state", "HYPOTHESIS"), ("values_available", True), ("claims", {**d["claims"], "ops": []})]:
        tampered = {**d, key: value}
        with pytest.raises(errors.EnvelopeTamperedError) as info:
            claims.envelope_from_dict(tampered)
        assert info.value.code == "envelope_digest_mismatch"
    with pytest.raises(errors.EnvelopeTamperedError):
        claims.envelope_from_dict({k: v for k, v in d.items() if k != "twin"})


def test_save_load_round_trip_is_hypothesis_again_and_can_be_rediscarged(tmp_path):
    st, rt = pair(tiny_gpt2, IDS)
    audit = st.check_plan([("transformer.h.0.mlp", torch.empty(1, 8, 32, device="meta"))])
    st = st.with_envelope(claims.plan_checked(st.envelope, audit))
    st = st.with_envelope(st.discharge_against(rt).envelope)
    st.save(str(tmp_path / "t"))
    back = tracer.load(str(tmp_path / "t"))
    assert back.structure_only and back.ladder_state == "HYPOTHESIS" and back.values == {}
    assert back.envelope.claims == st.envelope.claims
    assert back.envelope.plan_checks[0]["entries"][0]["status"] == "fits"  # the plan audit is saved with it
    assert "HYPOTHESIS" in repr(back)
    assert back.discharge_against(rt).state == "CORROBORATED"
    rt.save(str(tmp_path / "r"))  # the real side loaded from a file: its claim rows are the live trace's
    assert claims.join.claim_table(tracer.load(str(tmp_path / "r"))) == claims.join.claim_table(rt)
    assert st.discharge_against(tracer.load(str(tmp_path / "r"))).state == "CORROBORATED"


def test_tampered_envelope_in_a_saved_file_refuses(tmp_path):
    from tracer import store

    st, _ = pair(tiny_gpt2, IDS)
    folder = store.save_trace(st, tmp_path / "t")
    doc = json.loads((folder / "trace.json").read_text())
    doc["trace"]["envelope"]["ladder_state"] = "CORROBORATED"
    doc["digest"]["structure"] = store._digest(doc["trace"])  # the outer digest is redone: only the envelope's catches it
    (folder / "trace.json").write_text(json.dumps(doc))
    with pytest.raises(errors.EnvelopeTamperedError):
        tracer.load(str(folder))


# -- consumers of the ladder ------------------------------------------------------------------
def test_measurements_refuse_on_structure_only_and_work_on_real():
    st, rt = pair(tiny_gpt2, IDS)
    for call in (lambda t: claims.activation_stats(t, "linear_1" if "linear_1" in t else t.ops[2].label),
                 claims.timings, claims.memory_peak):
        with pytest.raises(errors.StructureOnlyMeasurementsError) as info:
            call(st)
        assert info.value.code == "structure_only_measurements_unsupported"
    label = rt.ops[2].label
    stats = claims.activation_stats(rt, label)
    assert stats["numel"] == rt[label].out.numel and stats["min"] <= stats["mean"] <= stats["max"]
    assert claims.timings(rt)["capture_seconds"] > 0 and claims.memory_peak(rt) > 0


def test_require_corroborated_refuses_hypothesis_and_refuted():
    st, rt = pair(tiny_gpt2, IDS)
    with pytest.raises(errors.NotCorroboratedError) as info:
        claims.require_corroborated(st, "export with corroborated shapes")
    assert info.value.findings["ladder_state"] == "HYPOTHESIS"
    claims.require_corroborated(rt, "anything")  # eager traces are OBSERVED
    claims.require_corroborated(st.with_envelope(st.discharge_against(rt).envelope), "anything")
    wrong = tracer.trace(meta_twin(tiny_gpt2()).to(torch.bfloat16), (IDS.to("meta"),), capture=SO)
    wrong = wrong.with_envelope(wrong.discharge_against(rt).envelope)
    with pytest.raises(errors.NotCorroboratedError):
        claims.require_corroborated(wrong, "anything")


# -- intervention sites and plans ---------------------------------------------------------------
def test_every_op_output_is_an_addressable_site():
    from tracer.claims.plan import intervention_sites, resolve_site

    st, _ = pair(tiny_llama, IDS)
    sites = intervention_sites(st)
    assert len(sites) == len(st) - len(st.outputs)
    for row in sites:
        assert resolve_site(st, row["label"]) is resolve_site(st, row["path"]) is st[row["label"]]
        assert row["shape"] == list(st[row["label"]].out.shape)
    q = resolve_site(st, "model.layers.1.self_attn.q_proj")
    assert q.kind == "linear" and q.out.shape == (1, 8, 32) and q.params == ("model.layers.1.self_attn.q_proj.weight",)


def test_check_plan_reports_each_entry_and_never_executes():
    st, _ = pair(tiny_llama, IDS)
    n_ops, env_before = len(st), st.envelope
    plan = [
        ("model.layers.0.mlp", torch.empty(1, 8, 32, device="meta")),        # fits
        ("model.layers.0.mlp", torch.empty(32, device="meta")),              # a steering vector broadcasts
        ("model.layers.0.mlp/linear_5", torch.empty(1, 8, 32, device="meta")),  # wrong module for that label
        ("model.layers.7.mlp", torch.empty(1, 8, 32, device="meta")),        # no such layer
        ("model.layers.0.self_attn.k_proj", torch.empty(1, 8, 32, device="meta")),  # k_proj is (1, 8, 16)
        ("model.layers.0.mlp", torch.empty(1, 8, 32, dtype=torch.float16, device="meta")),
    ]
    report = st.check_plan(plan)
    assert [e.status for e in report.entries] == ["fits", "broadcasts", "missing_site", "missing_site",
                                                  "shape_mismatch", "dtype_mismatch"]
    assert report.entries[4].site_shape == (1, 8, 16) and not report.ok and report.ladder_state == "HYPOTHESIS"
    assert len(st) == n_ops and st.envelope is env_before  # a returned report: the trace is unchanged
    kept = claims.plan_checked(st.envelope, report)  # to keep the audit with the trace: a new envelope
    assert kept.plan_checks[-1]["entries"][0]["label"] == report.entries[0].label and not st.envelope.plan_checks
    with pytest.raises(errors.InvalidInputError):
        st.check_plan([("model.layers.0.mlp", [1, 8, 32])])
