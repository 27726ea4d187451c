"""`Trace.to_agent_json()`: the versioned agent document of a weights-free 8B config and an eager model."""
from __future__ import annotations

import json

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer import errors
from tracer.agent_json import SCHEMA, find_op, select_ops
from tracer.bridges.transformers import trace_config


@pytest.fixture(scope="module")
def llama8b():
    return trace_config("llama-3.1-8b")


@pytest.fixture(scope="module")
def eager():
    model = tiny_gpt2()
    return model, tracer.trace(model, (torch.randint(0, 50, (1, 5)),))


def test_8b_document_is_plain_deterministic_json_with_the_ladder(llama8b):
    doc = llama8b.to_agent_json()
    text = json.dumps(doc)
    assert text == json.dumps(llama8b.to_agent_json())  # same trace, same bytes
    assert json.loads(text) == doc  # nothing that JSON would change (tuples, mapping proxies)
    assert doc["schema"] == SCHEMA == "torchlens-explore.agent/1"
    s = doc["summary"]
    assert (s["model_class"], s["ops"], s["parameters"]) == ("LlamaForCausalLM", len(llama8b), llama8b.param_count())
    assert s["ladder_state"] == doc["ladder"]["state"] == "HYPOTHESIS" and s["structure_only"] is True
    ev = doc["ladder"]["evidence"]
    env = llama8b.envelope
    assert (ev["mode"], ev["substrate"], ev["values_available"], ev["digest"]) == (
        "structure_only", "meta", False, env.digest)
    assert {k: v["rows"] for k, v in ev["claims"].items()} == env.counts
    assert ev["claims"]["ops"]["digest"] == env.claim_digests["ops"] and ev["discharge"] is None
    assert doc["doctor"] is None


def test_module_tree_folds_the_32_decoder_layers(llama8b):
    tree = llama8b.to_agent_json(ops=False)["modules"]
    assert tree["address"] == "" and tree["parameters"] == llama8b.param_count()
    layers = next(c for c in tree["children"][0]["children"] if c["address"] == "model.layers")
    assert len(layers["children"]) == 1
    assert layers["children"][0]["repeat"]["count"] == 32
    assert layers["children"][0]["repeat"]["addresses"][-1] == "model.layers.31"
    unfolded = llama8b.to_agent_json(ops=False, fold=False)["modules"]
    layers = next(c for c in unfolded["children"][0]["children"] if c["address"] == "model.layers")
    assert len(layers["children"]) == 32 and "repeat" not in layers["children"][0]


def test_ops_by_label_and_by_module(llama8b):
    doc = llama8b.to_agent_json()
    assert list(doc["ops"]) == [op.label for op in llama8b.ops]
    q = llama8b.modules["model.layers.3.self_attn.q_proj"].calls[0].outputs[0]
    row = doc["ops"][q]
    assert row["module"] == "model.layers.3.self_attn.q_proj" and row["shape"] == list(llama8b[q].out.shape)
    assert row["params"] == ["model.layers.3.self_attn.q_proj.weight"]
    assert q in doc["ops_by_module"]["model.layers.3.self_attn.q_proj"]
    assert sum(len(v) for v in doc["ops_by_module"].values()) == len(llama8b)
    assert "ops" not in llama8b.to_agent_json(ops=False)


def test_find_op_by_label_module_path_and_refusal(llama8b):
    mlp_out = llama8b.modules["model.layers.0.mlp"].calls[0].outputs[0]
    assert find_op(llama8b, "model.layers.0.mlp").label == mlp_out  # a module path names its call's output
    label = llama8b.ops[5].label
    assert find_op(llama8b, label) is llama8b.ops[5]
    with pytest.raises(errors.InvalidInputError) as info:
        find_op(llama8b, "model.layers.99")
    assert info.value.code == "invalid_input" and "find_ops" in info.value.remedy
    linears = select_ops(llama8b, kind="linear", module="model.layers.1")
    assert len(linears) == 7 and all(op.module.startswith("model.layers.1.") for op in linears)


def test_eager_trace_is_observed_and_doctor_rows_when_asked(eager):
    model, tr = eager
    doc = tr.to_agent_json(doctor=model)
    assert doc["ladder"]["state"] == doc["summary"]["ladder_state"] == "OBSERVED"
    assert doc["ladder"]["evidence"]["mode"] == "eager" and doc["ladder"]["evidence"]["values_saved"] == len(tr.values)
    report = tracer.doctor(model)
    assert doc["doctor"]["rows"] == json.loads(json.dumps(report.to_dict()))["rows"]
    assert tr.to_agent_json(doctor=report)["doctor"] == doc["doctor"]
    with pytest.raises(errors.InvalidInputError):
        tr.to_agent_json(doctor="not a model")


def test_discharged_and_loaded_states_are_what_the_document_says(tmp_path):
    from tests.models import tiny_llama
    from tracer.bridges.transformers import trace_ids

    real = tiny_llama()
    with torch.device("meta"):
        twin = type(real)(real.config).eval()
    st = trace_ids(twin, (1, 6))
    rt = tracer.trace(real, (torch.randint(0, 100, (1, 6)),))
    done = st.with_envelope(st.discharge_against(rt).envelope)
    doc = done.to_agent_json(ops=False)
    assert doc["ladder"]["state"] == "CORROBORATED" and doc["ladder"]["evidence"]["discharge"] is not None
    json.dumps(doc)
    loaded = tracer.load(str(done.save(tmp_path / "t")))
    assert loaded.to_agent_json(ops=False)["ladder"]["state"] == "HYPOTHESIS"  # load resets the ladder
