"""accelerate dispatch, CPU offload and disk offload on the real library (tiny GPT-2)."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer.errors import OffloadEvidenceMissingError
from tracer.replay.validate import validate, validation_report

accelerate = pytest.importorskip("accelerate")
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


@pytest.fixture(scope="module")
def plain():
    model = tiny_gpt2()
    with torch.no_grad():
        ref = model(IDS).logits
    return ref, tracer.trace(model, (IDS,))


def _offloaded(kind: str, tmp_path):
    model = tiny_gpt2()
    if kind == "dispatch":
        return accelerate.dispatch_model(model, {"": "cpu"})
    if kind == "cpu":
        return accelerate.cpu_offload(model, execution_device="cpu")
    return accelerate.disk_offload(model, str(tmp_path), execution_device="cpu")


def _aliases(t) -> dict[str, set[str]]:
    return {rec.address: {rec.address, *rec.tied} for rec in t.params.values()}


@pytest.mark.parametrize("kind", ["dispatch", "cpu", "disk"])
def test_offload_capture_matches_plain_twin_and_validates(kind, plain, tmp_path):
    ref, twin = plain
    model = _offloaded(kind, tmp_path)
    t = tracer.trace(model, (IDS,))
    assert torch.equal(t.output.logits, ref)  # outputs equal the bare forward
    assert [op.label for op in t.ops] == [op.label for op in twin.ops]  # hook weight loading is not an op
    names = _aliases(twin)
    for mine, theirs in zip(t.ops, twin.ops):  # weights attribute to records made before the forward
        assert all(a in t.params for a in mine.params)
        assert {a for a in mine.params} <= set().union(*(names[p] for p in theirs.params)) | set(), mine.label
        assert len(mine.params) == len(theirs.params)
    report = validation_report(t)
    assert report.passed, report.to_text()
    if kind != "dispatch":
        assert t.provenance["offload"]["offloaded"] == len(list(model.named_parameters()))
        assert t.provenance["deferred_args"] is True
        assert all(rec.device == "meta" for rec in t.params.values())
        assert any("shape-only" in w for w in t.warnings)  # values outside a forward say so
        assert t.provenance["offload"]["storage"] == (["disk"] if kind == "disk" else ["cpu"])


def test_meta_parameter_without_offload_hook_refuses(tmp_path):
    model = accelerate.cpu_offload(tiny_gpt2(), execution_device="cpu")
    # A meta parameter the offload store does not hold: no hook will ever load it.
    model.transformer.h[0].mlp.c_fc.extra = torch.nn.Parameter(torch.empty(3, device="meta"))
    with pytest.raises(OffloadEvidenceMissingError) as err:
        tracer.trace(model, (IDS,))
    assert err.value.code == "meta_parameter_without_offload_hook"
    assert err.value.findings["missing"] == ["transformer.h.0.mlp.c_fc.extra"]


def test_hooks_are_restored_after_capture(tmp_path):
    model = accelerate.cpu_offload(tiny_gpt2(), execution_device="cpu")
    hook = model.transformer.h[0].attn.c_attn._hf_hook
    tracer.trace(model, (IDS,))
    assert "pre_forward" not in vars(hook) and "post_forward" not in vars(hook)


@pytest.mark.parametrize("kind", ["cpu", "disk"])
def test_inference_only_keeps_no_materialized_shard_alive(kind, tmp_path, monkeypatch):
    import accelerate.hooks as hooks

    seen: list[weakref.ref] = []
    real = hooks.set_module_tensor_to_device

    def spy(module, name, device, *args, **kwargs):
        real(module, name, device, *args, **kwargs)
        if str(device) != "meta":
            seen.append(weakref.ref(module._parameters.get(name) if name in module._parameters else module._buffers[name]))

    monkeypatch.setattr(hooks, "set_module_tensor_to_device", spy)
    model = _offloaded(kind, tmp_path)
    t = tracer.trace(model, (IDS,), capture=tracer.CaptureOptions(inference_only=True))
    gc.collect()
    assert seen and all(r() is None for r in seen)  # the trace holds references, not shards
    assert validate(t)  # replay reloads them from the offload store


class _WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x):
        return self.lin(x) * self.scale


def test_buffer_offload_attributes_the_loaded_buffer():
    torch.manual_seed(0)
    model = _WithBuffer()
    x = torch.randn(2, 4)
    ref = model(x)
    model = accelerate.cpu_offload(model, execution_device="cpu", offload_buffers=True)
    t = tracer.trace(model, (x,))
    assert torch.equal(t.output, ref)
    assert t.provenance["offload"]["offloaded_buffers"] == ["scale"]
    # the buffer the hook loads for the call is attributed to its address, never a constant
    mul = next(op for op in t.ops if op.kind == "mul")
    assert "scale" in mul.params
    assert not any(op.kind == "constant" for op in t.ops)


def test_buffer_offload_capture_validates():
    torch.manual_seed(0)
    model = accelerate.cpu_offload(_WithBuffer(), execution_device="cpu", offload_buffers=True)
    t = tracer.trace(model, (torch.randn(2, 4),))
    report = validation_report(t)
    assert report.passed, report.to_text()
