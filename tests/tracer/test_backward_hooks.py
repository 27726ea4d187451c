"""[issue 14] The backward capture beside retained graphs, user hooks and reentrant checkpointing.

Each case builds the same small model twice from one seed: one runs the plain backward, the other is
captured. `param.grad` must be bit-equal, user hooks must run as often, and what the capture records
(recomputation, nodes, saved bytes) must match a hand count.
"""
from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from torch import nn

import tracer
from tests.tracer.test_backward import _hand_counted_bytes
from tracer.backward.replay import validate_backward
from tracer.options import CaptureOptions

BACKWARD = CaptureOptions(backward=True)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Net(nn.Module):
    """inp -> block (optionally checkpointed, optionally with a tensor hook on its input) -> head."""

    def __init__(self, reentrant: bool | None = None, tensor_hook: bool = False) -> None:
        super().__init__()
        self.inp, self.block, self.head = nn.Linear(4, 8), Block(), nn.Linear(8, 2)
        self.reentrant, self.tensor_hook, self.hook_calls = reentrant, tensor_hook, 0

    def forward(self, x):
        h = self.inp(x)
        if self.tensor_hook:
            h.register_hook(self._scale)
        h = self.block(h) if self.reentrant is None else checkpoint.checkpoint(self.block, h,
                                                                               use_reentrant=self.reentrant)
        return self.head(h)

    def _scale(self, grad):
        self.hook_calls += 1
        return grad * 3


def _pair(**kw) -> tuple[Net, Net]:
    torch.manual_seed(0)
    a = Net(**kw)
    torch.manual_seed(0)
    return a, Net(**kw)


def _same_grads(a: nn.Module, b: nn.Module) -> bool:
    return all(p.grad is not None and torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))


X = torch.randn(3, 4)


def test_a_loss_that_runs_its_own_backward_with_retain_graph_then_the_captured_one():
    plain, captured = _pair()
    out = plain(X).sum()
    out.backward(retain_graph=True)
    out.backward()  # two backwards over one graph: .grad holds both

    def loss(o):
        total = o.sum()
        total.backward(retain_graph=True)  # the user's own backward, before the capture's
        return total

    t = tracer.trace(captured, (X,), capture=BACKWARD, loss=loss)
    assert _same_grads(plain, captured)
    assert all(n.order is not None for n in t.backward.nodes)  # the recorded backward is the capture's one
    assert t.backward.loss == "loss=loss(output)"


def test_backward_replay_retains_the_graph_and_a_second_capture_accumulates_like_a_second_backward():
    plain, captured = _pair()
    for _ in range(2):
        plain(X).sum().backward()
    t = tracer.trace(captured, (X,), capture=CaptureOptions(backward=True, backward_replay=True))
    assert t.backward.live_nodes  # retain_graph=True: the graph outlives the backward
    assert validate_backward(t)  # and can be run again, node by node
    tracer.trace(captured, (X,), capture=BACKWARD)
    assert _same_grads(plain, captured)


def test_user_tensor_hooks_run_once_and_change_the_gradient_as_in_the_plain_backward():
    plain, captured = _pair(tensor_hook=True)
    plain(X).sum().backward()
    tracer.trace(captured, (X,), capture=BACKWARD)
    assert plain.hook_calls == captured.hook_calls == 1
    assert _same_grads(plain, captured)
    unhooked, _ = _pair()
    unhooked(X).sum().backward()
    assert not torch.equal(unhooked.inp.weight.grad, captured.inp.weight.grad)  # the hook's x3 is in there


@pytest.mark.parametrize("kind", ["full", "pre"])
def test_module_backward_hooks_run_once_are_named_and_leave_the_gradients_equal(kind):
    plain, captured = _pair()
    calls = {"plain": 0, "captured": 0}

    def make(who):
        def hook(module, grads, *rest):
            calls[who] += 1
            return tuple(g * 2 if g is not None else None for g in grads)
        return hook

    for who, model in (("plain", plain), ("captured", captured)):
        register = (model.block.register_full_backward_hook if kind == "full"
                    else model.block.register_full_backward_pre_hook)
        register(make(who))
    plain(X).sum().backward()
    t = tracer.trace(captured, (X,), capture=BACKWARD)
    assert calls == {"plain": 1, "captured": 1}
    assert _same_grads(plain, captured)
    assert "BackwardHookFunctionBackward" in {n.name for n in t.backward.nodes}
    assert any("module backward hooks ran" in note and "block" in note for note in t.backward.notes)
    assert len(captured.block._backward_hooks) + len(captured.block._backward_pre_hooks) == 1  # the user's, kept


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointing_reentrant_or_not_shows_recomputation_and_counts_what_the_forward_saves(reentrant):
    plain, captured = _pair(reentrant=reentrant)
    twin, _ = _pair(reentrant=reentrant)
    expected = _hand_counted_bytes(twin, (X,))
    plain(X).sum().backward()
    t = tracer.trace(captured, (X,), capture=BACKWARD)
    bw = t.backward
    assert _same_grads(plain, captured)
    assert bw.recomputed == {"block": 1, "block.fc1": 1, "block.fc2": 1}
    assert sum(s.bytes for rows in bw.saved.values() for s in rows) == expected
    linears = [op.label for op in t.ops if op.func.endswith("linear")]  # inp, block.fc1, block.fc2, head
    first_in_block = linears[1]
    # the block's input, kept by torch.utils.checkpoint to re-run it, counted at the block's first op
    assert [s.alias for s in bw.saved[first_in_block]] == [f"output:{linears[0]}"]
    names = {n.name for n in bw.nodes}
    if reentrant:
        assert "CheckpointFunctionBackward" in names and "ReluBackward0" not in names
        assert set(bw.no_node) >= {first_in_block} and any("reentrant checkpointing" in n for n in bw.notes)
    else:
        assert "CheckpointFunctionBackward" not in names and "ReluBackward0" in names and not bw.no_node
