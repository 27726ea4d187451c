"""Two captures at once: each thread records its own boundary ops; one model is captured by one thread at a time."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch import nn

import tracer
from tracer.capture import boundaries
from tracer.capture.boundaries import ForeignKernelWarning
from tracer.errors import ConcurrentCaptureError

X = torch.randn(2, 3)


class Twice(torch.autograd.Function):
    """A foreign kernel: recorded as one boundary op per call."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class Paused(nn.Module):
    """Calls the Function, runs `pause` (a barrier or an event wait), then calls it again."""

    def __init__(self, pause) -> None:
        super().__init__()
        self.pause = pause

    def forward(self, x):
        y = Twice.apply(x)
        self.pause()
        return Twice.apply(y + 1)


def _run(results: dict, key: str, model: nn.Module, done: threading.Event | None = None) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ForeignKernelWarning)
            results[key] = tracer.trace(model, (X,))
    except BaseException as exc:  # reported on the main thread
        results[key] = exc
    finally:
        if done is not None:
            done.set()


def test_two_threads_capturing_at_overlapping_times_both_record_their_boundary_ops():
    # Both forwards are inside their capture at the barrier; the first capture then ends while
    # the second is still running, and the second's next Function call must still be recorded.
    barrier = threading.Barrier(2, timeout=30)
    first_done = threading.Event()
    first = Paused(barrier.wait)
    second = Paused(lambda: (barrier.wait(), first_done.wait(30)))
    results: dict = {}
    threads = [threading.Thread(target=_run, args=(results, "first", first, first_done)),
               threading.Thread(target=_run, args=(results, "second", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for key in ("first", "second"):
        t = results[key]
        assert isinstance(t, tracer.Trace), t
        fn_ops = [op for op in t.ops if op.kind == "autograd_function"]
        assert [op.func.rsplit(".", 1)[-1] for op in fn_ops] == ["Twice", "Twice"], key
        assert torch.equal(t.output, (X * 2 + 1) * 2)
    assert getattr(boundaries._active, "session", None) is None


def test_function_apply_passes_straight_through_without_a_capture():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignKernelWarning)
        tracer.trace(Paused(lambda: None), (X,))
    assert torch.autograd.Function.__dict__["apply"] is boundaries.PASS_THROUGH  # installed once, stays
    out = Twice.apply(X)  # no capture on this thread: plain autograd Function call
    assert torch.equal(out, X * 2)


class Outer(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) - 1


def test_same_model_from_two_threads_refuses_the_second_typed():
    inside, release = threading.Event(), threading.Event()
    model = Outer(Paused(lambda: (inside.set(), release.wait(30))))
    results: dict = {}
    worker = threading.Thread(target=_run, args=(results, "first", model))
    worker.start()
    try:
        assert inside.wait(30)
        for target in (model, model.inner):  # the model, or a module inside it, while the worker captures it
            with pytest.raises(ConcurrentCaptureError) as info:
                tracer.trace(target, (X,))
            assert info.value.code == "model_already_capturing" and info.value.remedy
    finally:
        release.set()
        worker.join(60)
    first = results["first"]
    assert isinstance(first, tracer.Trace), first
    assert [op.kind for op in first.ops].count("autograd_function") == 2  # the first capture is unharmed
    assert first.modules["inner"].calls and len(first.modules["inner"].calls) == 1
    assert not model._forward_hooks and not model.inner._forward_pre_hooks  # nothing left installed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignKernelWarning)
        again = tracer.trace(model, (X,))  # free again once the first capture finished
    assert [op.kind for op in again.ops] == [op.kind for op in first.ops]
