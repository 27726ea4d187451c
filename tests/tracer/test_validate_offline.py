"""[issue 11] Offline validation: a trace saved with values validates in another process.

The other process has no live calls: it replays every op from the call template stored in
the trace file (`Op.attrs`), with the model's parameters from a safetensors state dict.
Calls a file cannot hold (a foreign callable, an arbitrary Python object argument) become
typed "not replayable offline" findings naming their op; nothing raises untyped.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

import tracer
from tests.models import tiny_gpt2

ROOT = Path(__file__).resolve().parents[2]
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])

_CHILD = """
import json, sys
from safetensors.torch import load_file
import tracer
from tracer.replay.validate import validation_report
trace = tracer.load(sys.argv[1])
params = load_file(sys.argv[2]) if sys.argv[2] != "-" else None
report = validation_report(trace, params=params)
print(json.dumps({"live_calls": len(trace.live_calls), "report": report.to_dict(),
                  "validate": tracer.validate(trace, params=params).passed}))
"""


def _validate_elsewhere(trace, model: nn.Module, tmp_path: Path, with_params: bool = True) -> dict:
    folder = trace.save(tmp_path / "trace")
    weights = tmp_path / "weights.safetensors"
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, str(weights))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(folder), str(weights) if with_params else "-"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_gpt2_trace_validates_in_another_process(tmp_path):
    model = tiny_gpt2()
    t = tracer.trace(model, (IDS,))
    got = _validate_elsewhere(t, model, tmp_path)
    report = got["report"]
    assert got["live_calls"] == 0  # really replayed from the stored templates
    assert report["passed"] and got["validate"] is True, report
    calls = sum(1 for op in t.ops if op.kind not in ("input", "output", "constant"))
    assert report["ops_exact"] == calls and report["edges_carrying"] > 0


def test_offline_without_parameters_names_each_op_that_needs_one(tmp_path):
    model = tiny_gpt2()
    t = tracer.trace(model, (IDS,))
    report = _validate_elsewhere(t, model, tmp_path, with_params=False)["report"]
    assert not report["passed"]
    needing = {op.label for op in t.ops if op.params}
    found = {f["label"] for f in report["findings"]}
    assert found and found <= needing
    assert all(f["check"] == "not_replayable_offline" and "was not supplied" in f["message"]
               for f in report["findings"])


def test_train_mode_batchnorm_validates_offline(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).train()
    t = tracer.trace(model, (torch.randn(6, 4),))
    report = _validate_elsewhere(t, model, tmp_path)["report"]  # state dict saved after the forward
    assert report["passed"], report


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


class _Row:
    """An index object: a plain Python object a trace file cannot store."""

    def __index__(self) -> int:
        return 1


class _Unstorable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        y = _Scale.apply(self.proj(x))
        return y[_Row()] + 1


def test_foreign_callables_and_python_objects_are_typed_offline_findings(tmp_path):
    torch.manual_seed(0)
    model = _Unstorable()
    t = tracer.trace(model, (torch.randn(3, 4),))
    assert tracer.validate(t)  # in this process the live calls replay
    report = _validate_elsewhere(t, model, tmp_path)["report"]
    by_label = {f["label"]: f for f in report["findings"]}
    foreign = next(op for op in t.ops if op.label.startswith("autograd_function"))
    getitem = next(op for op in t.ops if op.kind == "getitem")
    assert set(by_label) == {foreign.label, getitem.label}
    assert all(f["check"] == "not_replayable_offline" for f in by_label.values())
    # the child never imported this module: the Function is not resolved, and the remedy says how
    assert "not a torch function" in by_label[foreign.label]["message"]
    assert "offline_callables" in by_label[foreign.label]["message"]
    assert "_Row" in by_label[getitem.label]["message"]
    assert t[getitem.label].attrs["args"][1] == {"opaque": "tests.tracer.test_validate_offline._Row"}
    assert report["ops_exact"] >= 2  # linear and add replayed offline


def test_the_model_itself_supplies_non_persistent_buffers_offline(tmp_path):
    """BERT's position_ids is a non-persistent buffer (absent from state_dict): params=model supplies it."""
    from tests.models import tiny_bert

    model = tiny_bert()
    ids = torch.tensor([[5, 17, 3, 9]])
    loaded = tracer.load(tracer.trace(model, (ids,)).save(tmp_path / "bert"))
    assert "embeddings.position_ids" not in model.state_dict()
    partial = tracer.validate(loaded, params=model.state_dict())
    assert not partial.passed and "position_ids" in partial.findings[0].message
    report = tracer.validate(loaded, params=model)
    assert report.passed, report.to_text()
