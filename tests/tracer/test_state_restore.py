"""Capture is scoped: the model and torch are exactly as before, also when the forward raises."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.modules import module as nn_module

import tracer
from tests.models import tiny_gpt2


def snapshot(model: nn.Module) -> dict:
    """Everything a capture could conceivably leave behind."""
    return {
        "hooks": [(name, dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._forward_hooks_with_kwargs),
                   set(m._forward_hooks_always_called), dict(m._forward_pre_hooks_with_kwargs),
                   dict(m._backward_hooks)) for name, m in model.named_modules()],
        "training": [(name, m.training) for name, m in model.named_modules()],
        "params": [(name, id(p), p.detach().clone(), p.requires_grad) for name, p in model.named_parameters()],
        "buffers": [(name, id(b), b.detach().clone()) for name, b in model.named_buffers()],
        "forward": [(name, m.forward) for name, m in model.named_modules()],
        "global_hooks": (dict(nn_module._global_forward_hooks), dict(nn_module._global_forward_pre_hooks)),
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "dtype": torch.get_default_dtype(),
        "fn_modes": torch._C._len_torch_function_stack(),
        "attrs": [(name, sorted(vars(m))) for name, m in model.named_modules()],
    }


def assert_same(before: dict, after: dict) -> None:
    for key in before:
        a, b = before[key], after[key]
        if key in ("params", "buffers"):
            assert [x[:2] for x in a] == [x[:2] for x in b], key
            assert all(torch.equal(x[2], y[2]) for x, y in zip(a, b)), key
        else:
            assert a == b, key


class Boom(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        y = self.inner(x)
        return torch.matmul(y, torch.ones(5, 5))  # shape mismatch raises inside the op


def test_state_restored_after_successful_capture():
    m = tiny_gpt2()
    before = snapshot(m)
    tracer.trace(m, (torch.randint(0, 100, (1, 4)),))
    assert_same(before, snapshot(m))


def test_forward_that_raises_propagates_with_op_and_module_and_restores_state():
    m = Boom()
    before = snapshot(m)
    with pytest.raises(RuntimeError) as err:
        tracer.trace(m, (torch.randn(2, 4),))
    notes = "\n".join(getattr(err.value, "__notes__", []))
    assert "torch.matmul" in notes and "test_state_restore.py" in notes
    assert_same(before, snapshot(m))
    # the model still works untraced, and a second capture succeeds on a fixed input
    m.forward = lambda x: m.inner(x)
    assert tracer.trace(m, (torch.randn(2, 4),)).kind_counts()["linear"] == 1


def test_exception_inside_submodule_names_the_module():
    class Bad(nn.Module):
        def forward(self, x):
            return x.view(7, -1)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.bad = Bad()

        def forward(self, x):
            return self.bad(x)

    m = Outer()
    before = snapshot(m)
    with pytest.raises(RuntimeError) as err:
        tracer.trace(m, (torch.randn(3, 4),))
    assert "module 'bad'" in "\n".join(err.value.__notes__)
    assert_same(before, snapshot(m))


def test_python_exception_type_is_preserved():
    class Raises(nn.Module):
        def forward(self, x):
            x = x + 1
            raise KeyError("model's own error")

    m = Raises()
    before = snapshot(m)
    with pytest.raises(KeyError, match="model's own error"):
        tracer.trace(m, (torch.randn(2),))
    assert_same(before, snapshot(m))


def test_no_tags_left_on_user_tensors():
    m = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    t = tracer.trace(m, (x,))
    assert not hasattr(x, "__dict__") or not vars(x)
    assert not vars(t.output)
