"""Deep nesting: a chain of 10,000 modules (module i calls module i+1) captures and summarizes.

The tracer's own walks (module index, parameter naming, summary, op and parameter roll-ups) are
iterative, so only the model's own forward needs a deep Python stack: the test gives that forward
a raised recursion limit and a large thread stack, and runs `summary()` and the roll-ups at the
default recursion limit.
"""
from __future__ import annotations

import sys
import threading

import pytest
import torch
from torch import nn

import tracer
from tracer.module_tree import module_op_counts, module_param_counts

DEPTH = 10_000


class Link(nn.Module):
    """Adds one, then hands on to the next link (the last link ends in a Linear)."""

    def __init__(self, m: nn.Module | None = None) -> None:
        super().__init__()
        self.m = m if m is not None else nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x + 1)


def chain(depth: int) -> nn.Module:
    link: nn.Module = Link()
    for _ in range(depth - 1):
        link = Link(link)
    return link


def _in_deep_thread(fn):
    """Run `fn` on a thread with a stack large enough for the model's own 10,000-deep forward."""
    result: dict = {}

    def body():
        try:
            result["value"] = fn()
        except BaseException as exc:  # re-raised on the caller's thread
            result["error"] = exc

    previous = threading.stack_size(512 * 1024 * 1024)
    try:
        worker = threading.Thread(target=body)
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.mark.slow
def test_ten_thousand_nested_modules_capture_and_summarize():
    model = chain(DEPTH)
    x = torch.randn(1, 2)
    limit = sys.getrecursionlimit()

    def capture():
        sys.setrecursionlimit(6 * DEPTH)  # the model's forward recurses 4 frames per link
        try:
            return tracer.trace(model, x)
        finally:
            sys.setrecursionlimit(limit)

    t = _in_deep_thread(capture)
    assert sys.getrecursionlimit() == limit
    assert len(t.modules) == DEPTH + 1  # the chain's links and the Linear at its end
    assert t.kind_counts()["add"] == DEPTH and t.kind_counts()["linear"] == 1
    assert len(t.ops) == DEPTH + 3  # input, the adds, the Linear, output
    deepest = "m." * (DEPTH - 1) + "m"
    assert t.module(deepest).class_name == "Linear"
    assert t["linear_1"].module == deepest and len(t["linear_1"].module_stack) == DEPTH + 1

    text = t.summary()  # at the default recursion limit: no recursive walk anywhere
    assert text.count(": Link") == DEPTH - 1 and text.count(": Linear") == 1  # one line per module below the root
    assert text.startswith("Link  [OBSERVED]")
    ops = module_op_counts(t)
    assert ops[""] == DEPTH + 1 and ops["m"] == DEPTH and ops[deepest] == 1
    params = module_param_counts(t)
    assert params[""] == params["m"] == params[deepest] == 6


def test_module_stack_reads_compares_and_hashes_like_its_tuple():
    from tracer.ir import EMPTY_STACK

    stack = EMPTY_STACK.push("", 0).push("m", 0).push("m.m", 1)
    pairs = (("", 0), ("m", 0), ("m.m", 1))
    assert tuple(stack) == pairs and stack == pairs and pairs == stack and hash(stack) == hash(pairs)
    assert stack[-1] == ("m.m", 1) and stack[0] == ("", 0) and len(stack) == 3 and dict(stack) == dict(pairs)
    assert list(reversed(stack)) == list(reversed(pairs)) and not EMPTY_STACK and len(EMPTY_STACK) == 0
    deep_a, deep_b = EMPTY_STACK, EMPTY_STACK
    for i in range(DEPTH):  # comparing two long chains needs no recursion
        deep_a, deep_b = deep_a.push("m", i), deep_b.push("m", i)
    assert deep_a == deep_b and deep_a != deep_b.push("m", 0) and len(deep_a) == DEPTH
    t = tracer.trace(chain(3), torch.randn(1, 2))
    linear = t["linear_1"]
    assert linear.module_stack == (("", 0), ("m", 0), ("m.m", 0), ("m.m.m", 0))
    assert {linear.module_stack: 1}[tuple(linear.module_stack)] == 1  # usable as a key either way
