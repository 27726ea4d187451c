"""Capture is scoped: the model and torch are exactly as before, also when the forward raises."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tests import state
from tests.models import tiny_gpt2


def snapshot(model: nn.Module) -> dict:
    """The shared state snapshot plus copies of every value (nothing may be written)."""
    return {**state.snapshot(model), "values": state.values(model)}


def assert_same(before: dict, after: dict) -> None:
    a, b = before.pop("values"), after.pop("values")
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)), "values"
    state.assert_unchanged(before, after)


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
