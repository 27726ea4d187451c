"""`agent_json(max_ops=N)`: the op table cut to its first N ops in execution order, the cut disclosed."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer.agent_json import agent_json, api_map_json
from tracer.errors import InvalidInputError


@pytest.fixture(scope="module")
def gpt2():
    return tracer.trace(tiny_gpt2(), (torch.randint(0, 50, (1, 5)),))


def test_max_ops_keeps_the_first_ops_and_says_what_it_left_out(gpt2):
    whole = agent_json(gpt2)
    assert "ops_omitted" not in whole and len(whole["ops"]) == len(gpt2.ops)
    cut = agent_json(gpt2, max_ops=10)
    assert list(cut["ops"]) == [op.label for op in gpt2.ops[:10]]
    assert cut["ops_omitted"] == {"kept": 10, "total": len(gpt2.ops), "first_omitted": gpt2.ops[10].label,
                                  "how_to_get_more": cut["ops_omitted"]["how_to_get_more"]}
    assert sorted(label for labels in cut["ops_by_module"].values() for label in labels) == sorted(cut["ops"])
    assert cut["summary"] == whole["summary"] and cut["modules"] == whole["modules"]  # only the op table is cut
    assert "ops_omitted" not in agent_json(gpt2, max_ops=len(gpt2.ops))


@pytest.mark.parametrize("bad", [0, -1, 1.5, False])
def test_a_bad_max_ops_refuses_typed(gpt2, bad):
    with pytest.raises(InvalidInputError) as info:
        agent_json(gpt2, max_ops=bad)
    assert info.value.code == "invalid_input" and info.value.remedy


def test_the_api_map_lists_every_public_name_of_tracer():
    rows = {row["name"]: row for row in api_map_json()["names"]}
    assert set(rows) == set(tracer.__all__)
    assert rows["trace"] == {"name": "trace", "kind": "function", "module": "tracer.tracing",
                             "summary": tracer.trace.__doc__.strip().splitlines()[0]}
    assert rows["Trace"]["kind"] == "class" and rows["__version__"]["kind"] == "value"
    assert all(row["summary"] for row in rows.values())  # every public name has a documented first line


def test_the_trace_method_and_the_package_name_reach_the_same_documents(gpt2):
    trace = gpt2
    doc = trace.to_agent_json(max_ops=5)
    assert len(doc["ops"]) == 5 and doc["ops_omitted"]["total"] == len(trace.ops)
    assert tracer.explain(trace).startswith("Capture status")
