"""The Trace API: lookups, networkx view, summary text and repr."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_gpt2


@pytest.fixture(scope="module")
def t():
    return tracer.trace(tiny_gpt2(n_layer=3), (torch.randint(0, 100, (1, 5), generator=torch.Generator().manual_seed(0)),))


def test_lookups(t):
    assert t[0].kind == "input" and t["input_1"] is t[0]
    with pytest.raises(KeyError, match="no op labelled"):
        t["nope_1"]
    with pytest.raises(KeyError, match="no module"):
        t.module("transformer.h.9")
    block = t.module("transformer.h.1")
    assert block.class_name == "GPT2Block" and len(block.calls) == 1
    inside = t.ops_in("transformer.h.1")
    assert inside and all(any(a == "transformer.h.1" for a, _ in op.module_stack) for op in inside)
    call = block.calls[0]
    assert t[call.first_op] == inside[0] and t[call.last_op] == inside[-1]
    assert call.inputs and call.outputs and all(lbl in t for lbl in call.inputs + call.outputs)
    first = t.ops[1]
    assert first.label in {p.source for c in t.children_of(first.label) for p in t[c].parents}


def test_networkx_view_matches(t):
    g = t.to_networkx()
    assert g.number_of_nodes() == len(t) and g.number_of_edges() == t.num_edges
    import networkx as nx

    assert nx.is_directed_acyclic_graph(g)
    assert list(nx.topological_sort(g))  # a DAG in execution order
    assert g.nodes["linear_1"]["module"] == "lm_head"


def test_summary_folds_repeated_blocks_and_counts_tied_once(t):
    text = t.summary()
    assert "0-2: GPT2Block x3" in text
    assert f"{t.param_count():,} parameters (tied counted once)" in text
    assert "tied: lm_head.weight = transformer.wte.weight" in text
    assert "out (1, 5, 32)" in text
    assert text.splitlines()[0].endswith("[OBSERVED]")
    unfolded = t.summary(fold=False)
    assert "x3" not in unfolded and "2: GPT2Block" in unfolded


def test_repr_is_readable(t):
    r = repr(t)
    assert r.startswith("<Trace GPT2LMHeadModel:") and "ops" in r and "OBSERVED" in r
