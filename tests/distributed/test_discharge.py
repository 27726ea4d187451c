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
from tests.distributed.ranks import run_batch
from tests.distributed.test_simulate import TINY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> dict[str, object]:
    """The config, and the real 2-rank captures under both plans (one spawn: the two scenarios in turn)."""
    folder = tmp_path_factory.mktemp("discharge")
    config = folder / "tiny-llama.json"
    config.write_text(json.dumps(TINY))
    run_batch({plan: ("real_tp_for_discharge", {"TLX_CONFIG": str(config), "TLX_PLAN": plan}) for plan in ("tp", "mlp")},
              folder)
    return {"config": config, **{plan: tracer.load(folder / plan / "real") for plan in ("tp", "mlp")}}


def test_same_plan_corroborates(captured):
    result = td.simulate(captured["config"], tp=2).discharge_against(captured["tp"])
    assert result.envelope.ladder_state == "CORROBORATED", str(result)


def test_different_plan_refutes(captured):
    result = td.simulate(captured["config"], tp=2).discharge_against(captured["mlp"])
    assert result.envelope.ladder_state == "REFUTED" and "ops[" in str(result)
