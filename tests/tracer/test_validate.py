"""Replay validation: real tiny transformers replay bit for bit; tampering is caught and named."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_bert, tiny_gpt2, tiny_llama, tiny_resnet
from tracer.errors import (ReplayMismatchError, ReplayUnavailableError, StructureOnlyValidationError,
                           TraceInvariantError, ValidationScopeError, ValuesMissingError)
from tracer.ir import Edge, Trace
from tracer.replay.validate import validate, validation_report

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


@pytest.fixture(scope="module")
def gpt2_trace() -> Trace:
    return tracer.trace(tiny_gpt2(), (IDS,))


@pytest.mark.parametrize("factory", [tiny_gpt2, tiny_llama, tiny_bert, tiny_resnet])
def test_real_models_replay_bit_exact_and_every_edge_carries_data(factory):
    x = torch.randn(1, 3, 32, 32) if factory is tiny_resnet else IDS
    t = tracer.trace(factory(), (x,))
    report = validation_report(t)
    assert report.passed, report.to_text()
    calls = sum(1 for op in t.ops if op.kind not in ("input", "output", "constant"))
    assert report.ops_exact == calls  # every call op reproduced exactly (eval mode: nothing random)
    assert report.edges_carrying + report.edges_excused == report.edges_checked > 0
    returned = validate(t)
    assert returned and returned.passed and returned.to_dict() == {**report.to_dict(), "seconds": returned.to_dict()["seconds"]}
    assert "validation" not in t.provenance  # a report is returned, never written into the trace


def test_excuses_are_named_and_only_from_the_kernel_table(gpt2_trace):
    report = validation_report(gpt2_trace)
    # GPT-2's DynamicCache concatenates onto empty tensors: those edges hold no values.
    assert report.excused and all(why.startswith("the parent is empty") for _, _, why in report.excused)
    assert all(gpt2_trace[label].kind == "cat" for label, _, _ in report.excused)


def test_training_mode_dropout_is_compared_by_metadata_only():
    m = tiny_gpt2().train()
    t = tracer.trace(m, (IDS,))
    report = validation_report(t)
    assert report.passed, report.to_text()
    assert report.ops_nondeterministic >= 5  # dropout and sdpa(dropout_p>0) calls


def test_tampered_value_is_named_as_first_failing_op(gpt2_trace):
    t = gpt2_trace
    target = next(op for op in t.ops if op.kind == "layer_norm")
    saved = t.values[target.label]
    t.values[target.label] = saved + 1e-3
    try:
        report = validation_report(t)
        assert not report.passed and report.first_failing_op == target.label
        assert "while replaying" in report.findings[0].message and target.func in report.findings[0].message
        assert not validate(t)
        with pytest.raises(ReplayMismatchError) as err:
            validate(t, raise_on_failure=True)
        assert err.value.code == "replay_mismatch" and err.value.findings["first_failing_op"] == target.label
    finally:
        t.values[target.label] = saved


def test_rewired_edge_is_caught_by_replay(gpt2_trace):
    t = gpt2_trace
    # Point the second layer's first layer_norm at the first layer_norm's output (same shape).
    norms = [op for op in t.ops if op.kind == "layer_norm"]
    victim = norms[2]
    wrong = dataclasses.replace(victim, parents=(Edge(norms[0].label, "0"),))
    ops = tuple(wrong if op.label == victim.label else op for op in t.ops)
    forged = Trace(ops=ops, modules=t.modules, params=t.params, model_class=t.model_class,
                   provenance=dict(t.provenance), values=t.values, live_calls=t.live_calls)
    report = validation_report(forged)
    assert not report.passed and report.first_failing_op == victim.label


class _DeadEdge(nn.Module):
    def forward(self, x):
        y = torch.clamp(x, min=2.0, max=2.0)  # the recorded edge x -> clamp carries no data
        return y + x


def test_edge_that_carries_no_data_fails_the_perturbation_check():
    t = tracer.trace(_DeadEdge(), (torch.randn(3, 4),))
    report = validation_report(t)
    assert not report.passed
    first = report.findings[0]
    assert first.check == "edge" and t[first.label].kind == "clamp"
    assert validation_report(t, perturb=False).passed  # replay alone cannot see it


def test_invariant_violation_raises_typed(gpt2_trace):
    t = gpt2_trace
    victim = next(op for op in t.ops if op.kind == "addmm")
    bad = dataclasses.replace(victim, params=victim.params + ("transformer.h.9.not_a_param",))
    ops = tuple(bad if op.label == victim.label else op for op in t.ops)
    forged = Trace(ops=ops, modules=t.modules, params=t.params, model_class=t.model_class,
                   provenance=dict(t.provenance), values=t.values, live_calls=t.live_calls)
    with pytest.raises(TraceInvariantError) as err:
        validate(forged)
    assert err.value.code == "trace_invariant_violated" and victim.label in err.value.message


def test_refusals_are_typed(gpt2_trace):
    with pytest.raises(ValidationScopeError):
        validate(gpt2_trace, scope="backward")
    no_values = tracer.trace(tiny_gpt2(), (IDS,), capture=tracer.CaptureOptions(save="none"))
    with pytest.raises(ValuesMissingError):
        validate(no_values)
    t = gpt2_trace
    bare_ops = tuple(dataclasses.replace(op, attrs={}) for op in t.ops)  # no live calls, no call templates
    no_calls = Trace(ops=bare_ops, modules=t.modules, params=t.params, model_class=t.model_class,
                     provenance=dict(t.provenance), values=t.values)
    with pytest.raises(ReplayUnavailableError):
        validate(no_calls)
    structure = Trace(ops=t.ops, modules=t.modules, params=t.params, model_class=t.model_class,
                      provenance={"structure_only": True})
    with pytest.raises(StructureOnlyValidationError) as err:
        validate(structure)
    assert err.value.code == "structure_only_not_replayable"


def test_inplace_ops_replay_on_copies():
    class Inplace(nn.Module):
        def forward(self, x):
            y = x * 2
            y.add_(1)
            y[0] = 7.0
            return torch.relu_(y)

    x = torch.randn(3, 4)
    t = tracer.trace(Inplace(), (x,))
    before = {k: v.clone() for k, v in t.values.items()}
    assert validate(t), validation_report(t).to_text()
    assert all(torch.equal(before[k], t.values[k]) for k in before)  # replay never wrote a saved value
