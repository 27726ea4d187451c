"""The fast lane of validate (stacked pointwise replays, batched comparisons) proves only what the full checks
would: its reports equal theirs, and a forged value or a dead edge inside a stacked group still fails."""
from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch
from torch import nn

import tracer
from tests.models import TanhLoop, tiny_gpt2
from tracer.ir import Edge, Trace
from tracer.replay.batch import equal_each, equal_rows, noisy_each, same

validate_module = importlib.import_module("tracer.replay.validate")
lane_module = importlib.import_module("tracer.replay.lane")


class DeadEdges(nn.Module):
    """Many clamps to a constant: each recorded edge x -> clamp carries no data, in one stackable group."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(40):
            x = torch.clamp(x, min=2.0, max=2.0) + x
        return x


class Scalars(nn.Module):
    """Calls of one kernel that differ only in a scalar's type or sign: never stacked together."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        i = (x * 10).to(torch.int64)
        outs = [i * 2, i * 2.0, i * True, x * 0.0, x * -0.0, i + 1, i + 1.5]
        return torch.cat([o.to(torch.float32).reshape(-1) for o in outs])


def _without_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_module, "fast_lane", lambda replayer, calls, gen, perturb: [None] * len(calls))


def _same_report(trace: Trace, monkeypatch: pytest.MonkeyPatch, **kwargs) -> dict:
    fast = validate_module.validation_report(trace, **kwargs).to_dict()
    with monkeypatch.context() as m:
        _without_lane(m)
        full = validate_module.validation_report(trace, **kwargs).to_dict()
    fast.pop("seconds"), full.pop("seconds")
    assert fast == full
    return fast


@pytest.mark.parametrize("act", [torch.tanh, torch.sigmoid, nn.functional.gelu])
def test_lane_report_equals_the_full_checks(act, monkeypatch):
    t = tracer.trace(TanhLoop(150, act).eval(), (torch.randn(2, 4),))
    report = _same_report(t, monkeypatch)
    assert report["passed"] and report["ops_exact"] == len(t.ops) - 2  # every call bit-exact (sigmoid: alone)
    assert report["edges_carrying"] == report["edges_checked"] == len(t.ops) - 2


def test_lane_stacks_the_pointwise_calls(monkeypatch):
    stacked = []
    original = lane_module._replay_stacked

    def spy(replayer, ops, members, key, gen, perturb, found):
        stacked.append(len(ops))
        return original(replayer, ops, members, key, gen, perturb, found)

    monkeypatch.setattr(lane_module, "_replay_stacked", spy)
    t = tracer.trace(TanhLoop(150).eval(), (torch.randn(2, 4),))
    assert validate_module.validation_report(t).passed
    assert sum(stacked) == 450 and max(stacked) > 100  # mul, add and tanh calls, each kind replayed together


def test_forged_value_inside_a_stacked_group_fails_at_that_op(monkeypatch):
    t = tracer.trace(TanhLoop(150).eval(), (torch.randn(2, 4),))
    victim = [op for op in t.ops if op.kind == "tanh"][70]
    t.values[victim.label] = t.values[victim.label].clone()
    t.values[victim.label][1, 2] = torch.nextafter(t.values[victim.label][1, 2], torch.tensor(9.0))  # one ulp off
    report = _same_report(t, monkeypatch)
    assert not report["passed"] and report["first_failing_op"] == victim.label
    assert report["findings"][0]["check"] == "replay"


def test_rewired_edge_inside_a_stacked_group_fails(monkeypatch):
    t = tracer.trace(TanhLoop(150).eval(), (torch.randn(2, 4),))
    muls = [op for op in t.ops if op.kind == "mul"]
    victim, wrong_parent = muls[90], muls[40]  # same shape and dtype: only the values tell
    forged_op = dataclasses.replace(victim, parents=(Edge(wrong_parent.label, "0"),))
    ops = tuple(forged_op if op.label == victim.label else op for op in t.ops)
    forged = Trace(ops=ops, modules=t.modules, params=t.params, model_class=t.model_class,
                   provenance=dict(t.provenance), values=t.values, live_calls=t.live_calls)
    report = _same_report(forged, monkeypatch)
    assert not report["passed"] and report["first_failing_op"] == victim.label


def test_dead_edges_in_a_stacked_group_fail_the_perturbation_check(monkeypatch):
    t = tracer.trace(DeadEdges(), (torch.randn(3, 4),))
    report = _same_report(t, monkeypatch)
    clamps = [op.label for op in t.ops if op.kind == "clamp"]
    failed = [f["label"] for f in report["findings"] if f["check"] == "edge"]
    assert report["num_findings"] == len(clamps) == 40 and failed == clamps


def test_scalars_of_another_type_or_sign_are_replayed_apart(monkeypatch):
    t = tracer.trace(Scalars(), (torch.randn(3, 4),))
    report = _same_report(t, monkeypatch)
    assert report["passed"], report


def test_real_model_and_its_loaded_copy_match_the_full_checks(monkeypatch, tmp_path):
    model = tiny_gpt2()
    ids = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])
    t = tracer.trace(model, (ids,))
    assert _same_report(t, monkeypatch)["passed"]
    t.save(tmp_path / "t")
    loaded = tracer.load(tmp_path / "t")
    assert _same_report(loaded, monkeypatch, params=validate_module.model_tensors(model))["passed"]


def test_no_perturb_reports_match(monkeypatch):
    t = tracer.trace(TanhLoop(60).eval(), (torch.randn(2, 4),))
    report = _same_report(t, monkeypatch, perturb=False)
    assert report["passed"] and report["edges_checked"] == 0


def test_batched_comparisons_agree_with_same():
    nan = float("nan")
    a = [torch.tensor([1.0, nan]), torch.tensor([1.0, 2.0]), torch.zeros(0), torch.tensor([True, False]),
         torch.arange(5), torch.tensor(2.0), torch.randn(2, 2, dtype=torch.complex64), torch.ones(3, 4).t(),
         torch.tensor([0.0]), torch.randn(200, 100)]
    b = [torch.tensor([1.0, nan]), torch.tensor([1.0, 2.5]), torch.zeros(0), torch.tensor([True, True]),
         torch.arange(5), torch.tensor(2.0, dtype=torch.float64), a[6].clone(), torch.ones(4, 3),
         torch.tensor([-0.0]), a[9].clone()]
    pairs = list(zip(a, b)) + list(zip(a, a)) + [(torch.zeros(2), torch.zeros(3))]
    assert equal_each(pairs) == [same(x, y) for x, y in pairs]
    rows_a, rows_b = torch.randn(5, 3), torch.randn(5, 3)
    rows_b[2] = rows_a[2]
    assert equal_rows(rows_a, rows_b) == [False, False, True, False, False]


def test_noisy_copies_leave_the_originals_alone():
    x, y = torch.ones(3), torch.zeros(2, 2, dtype=torch.float16)
    noisy = noisy_each([x, y], torch.Generator().manual_seed(0))
    assert torch.equal(x, torch.ones(3)) and torch.equal(y, torch.zeros(2, 2, dtype=torch.float16))
    assert [n.shape for n in noisy] == [x.shape, y.shape] and [n.dtype for n in noisy] == [x.dtype, y.dtype]
    assert not torch.equal(noisy[0], x) and noisy[0].is_contiguous()
