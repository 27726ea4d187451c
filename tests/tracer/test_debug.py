"""tracer.backward.walk (also importable as tracer.debug): walking a real GPT-2 cross-entropy loss's autograd graph."""
from __future__ import annotations

import torch

from tests.models import tiny_gpt2

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


def test_walk_grad_fn_names_every_gpt2_parameter_leaf():
    from tracer.backward.walk import sketch_grad_fn, walk_grad_fn

    model = tiny_gpt2()
    out = model(IDS, labels=IDS)  # a real cross-entropy loss
    graph = walk_grad_fn(out.loss, model)
    wanted = {a for a, p in model.named_parameters() if p.requires_grad}  # tied head counted once
    assert set(graph.leaves) == wanted
    assert len({n.index for n in graph.nodes}) == len(graph)  # each node once
    reachable = {0}
    for n in graph.nodes:  # every node is reached from the loss
        if n.index in reachable:
            reachable.update(n.inputs)
    assert reachable == {n.index for n in graph.nodes}
    text = sketch_grad_fn(out.loss, model)
    assert f"{len(wanted)} parameter leaves" in text and "transformer.wte.weight" in text


def test_the_old_name_and_a_refusal():
    import pytest

    import tracer.debug
    from tracer.backward.walk import walk_grad_fn
    from tracer.errors import InvalidInputError

    assert tracer.debug.walk_grad_fn is walk_grad_fn
    with torch.no_grad():
        value = torch.ones(2, requires_grad=True) * 2
    with pytest.raises(InvalidInputError) as err:  # was a bare ValueError
        walk_grad_fn(value)
    assert err.value.code == "invalid_input" and "no_grad" in err.value.remedy
