"""Module scopes: a forward wrapper for modules without hooks, the hook pair for modules with their own.

Both mechanisms must give the same trace where they both apply, keep the user's hooks' semantics where
hooks exist, and leave every module exactly as it was (no `forward` attribute, no hook), also when the
forward raises.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tracer.replay.validate import validation_report


class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _untouched(model: nn.Module) -> bool:
    return all("forward" not in m.__dict__ and not m._forward_hooks and not m._forward_pre_hooks
               for m in model.modules()) and not nn.modules.module._global_module_registration_hooks


def _shape(t: tracer.Trace) -> tuple:
    ops = tuple((op.label, op.module_address, tuple(e.source for e in op.parents)) for op in t.ops)
    calls = {addr: [(c.inputs, c.outputs) for c in scope.calls] for addr, scope in t.modules.items()}
    return ops, calls


def test_wrapped_and_hooked_scopes_give_the_same_trace_and_leave_nothing_behind():
    torch.manual_seed(0)
    model, x = _Two(), torch.randn(2, 4)
    wrapped = tracer.trace(model, (x,))
    assert _untouched(model)
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, o: None)  # global: every scope hooked
    try:
        hooked = tracer.trace(model, (x,))
    finally:
        handle.remove()
    assert _untouched(model)
    assert _shape(wrapped) == _shape(hooked)
    assert [op.module_address for op in wrapped.ops if op.kind == "linear"] == ["a", "b"]


def test_a_user_forward_hook_stays_inside_its_module_and_its_output_is_the_modules():
    model = _Two()
    handle = model.a.register_forward_hook(lambda m, a, out: out * 2)
    t = tracer.trace(model, (torch.randn(2, 4),))
    mul = next(op for op in t.ops if op.kind == "mul")
    assert mul.module_address == "a"  # the hook ran in a's call, after its forward
    assert t.modules["a"].calls[0].outputs == (mul.label,)
    assert validation_report(t).passed
    assert list(model.a._forward_hooks.values()) == [handle.hooks_dict_ref()[handle.id]]  # theirs only
    assert "forward" not in model.a.__dict__ and "forward" not in model.b.__dict__
    handle.remove()


def test_a_backward_hooked_module_reads_its_wrapped_inputs_inside_its_scope():
    model = _Two()
    model.b.register_full_backward_hook(lambda m, gi, go: None)
    t = tracer.trace(model, (torch.randn(2, 4, requires_grad=True),))
    wrap_in = next(op for op in t.ops if op.kind == "view_as")  # torch's BackwardHookFunction on b's input
    relu = next(op for op in t.ops if op.kind == "relu")
    assert wrap_in.module_address == "b" and t.modules["b"].calls[0].inputs == (relu.label,)


class _Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner(x)
        raise ValueError("boom")


def test_a_forward_that_raises_leaves_no_wrapper():
    model = _Raises()
    with pytest.raises(ValueError, match="boom"):
        tracer.trace(model, (torch.randn(2, 4),))
    assert _untouched(model)
    assert torch._C._len_torch_function_stack() == 0


class _CallsForwardDirectly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.forward(x) + self.inner(x)


def test_a_direct_forward_call_is_not_a_module_call_under_either_mechanism():
    model, x = _CallsForwardDirectly(), torch.randn(2, 4)
    wrapped = tracer.trace(model, (x,))
    model.inner.register_forward_pre_hook(lambda m, a: None)
    hooked = tracer.trace(model, (x,))
    for t in (wrapped, hooked):
        assert len(t.modules["inner"].calls) == 1
        assert [op.module_address for op in t.ops if op.kind == "linear"] == ["", "inner"]


def test_an_instance_forward_set_before_the_capture_runs_scoped_and_is_put_back():
    model = _Two()
    calls = []
    original = model.a.forward

    def offload_style(x: torch.Tensor) -> torch.Tensor:  # as accelerate's hooks replace module.forward
        calls.append(1)
        return original(x)

    model.a.forward = offload_style
    t = tracer.trace(model, (torch.randn(2, 4),))
    assert calls == [1] and model.a.__dict__["forward"] is offload_style
    assert next(op for op in t.ops if op.kind == "linear").module_address == "a"
