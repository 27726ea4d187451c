"""[issue 16] A simulated sharded trace discharged against a real sharded capture of the same twin.

The tiny Llama config is simulated at tp 2 (fake backend, this process) and captured for real on a
2-process gloo mesh (same config, input 1x8, random weights) under the same tensor-parallel plan:
the discharge is CORROBORATED. Under a different plan (only the MLPs sharded) it is REFUTED, at the
first op where the two sharded graphs part.
"""
from __future__ import annotations

import json

import pytest

import tracer
import tracer.distributed as td
from tests.distributed.ranks import run_ranks
from tests.distributed.test_simulate import TINY

pytestmark = pytest.mark.slow


def _discharge(tmp_path, monkeypatch, plan: str):
    config = tmp_path / "tiny-llama.json"
    config.write_text(json.dumps(TINY))
    monkeypatch.setenv("TLX_CONFIG", str(config))
    monkeypatch.setenv("TLX_PLAN", plan)
    run_ranks("real_tp_for_discharge", tmp_path)
    simulated = td.simulate(config, tp=2)
    return simulated.discharge_against(tracer.load(tmp_path / "real"))


def test_same_plan_corroborates(tmp_path, monkeypatch):
    result = _discharge(tmp_path, monkeypatch, "tp")
    assert result.envelope.ladder_state == "CORROBORATED", str(result)


def test_different_plan_refutes(tmp_path, monkeypatch):
    result = _discharge(tmp_path, monkeypatch, "mlp")
    assert result.envelope.ladder_state == "REFUTED" and "ops[" in str(result)
