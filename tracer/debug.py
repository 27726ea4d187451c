"""Debugging aids outside the trace: walking a loss's autograd graph."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class GradNode:
    """One autograd node: its class name, the nodes it feeds from, the leaf it accumulates into."""

    index: int
    name: str
    inputs: tuple[int, ...]
    leaf: str | None = None  # parameter address (or "<leaf shape>" for a leaf the model does not own)


@dataclass
class GradGraph:
    """Every node reachable from a loss's `grad_fn`, each visited once, loss first."""

    nodes: list[GradNode] = field(default_factory=list)

    @property
    def leaves(self) -> dict[str, GradNode]:
        return {n.leaf: n for n in self.nodes if n.leaf is not None}

    def __len__(self) -> int:
        return len(self.nodes)


def walk_grad_fn(loss: torch.Tensor, model: nn.Module | None = None) -> GradGraph:
    """Breadth-first walk of `loss.grad_fn`; leaves named by their address in `model` (tied: first name)."""
    if loss.grad_fn is None:
        raise ValueError("the tensor has no grad_fn (was it computed under no_grad or from leaves only?)")
    names = {id(p): addr for addr, p in reversed(list(model.named_parameters()))} if model is not None else {}
    index: dict[Any, int] = {loss.grad_fn: 0}
    order = [loss.grad_fn]
    queue = deque([loss.grad_fn])
    edges: dict[int, list[int]] = {}
    while queue:
        fn = queue.popleft()
        ins = []
        for nxt, _ in getattr(fn, "next_functions", ()):
            if nxt is None:
                continue
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
                queue.append(nxt)
            ins.append(index[nxt])
        edges[index[fn]] = ins
    graph = GradGraph()
    for i, fn in enumerate(order):
        leaf = None
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor):
            leaf = names.get(id(var), f"<leaf {tuple(var.shape)}>")
        graph.nodes.append(GradNode(i, type(fn).__name__, tuple(edges.get(i, ())), leaf))
    return graph


def sketch_grad_fn(loss: torch.Tensor, model: nn.Module | None = None, max_lines: int = 60) -> str:
    """A text sketch of the autograd graph: node counts by kind, then the first nodes with their leaves."""
    graph = walk_grad_fn(loss, model)
    counts: dict[str, int] = {}
    for n in graph.nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    lines = [f"autograd graph: {len(graph)} nodes, {len(graph.leaves)} parameter leaves"]
    lines += [f"  {name} x{c}" for name, c in sorted(counts.items(), key=lambda kv: -kv[1])]
    lines.append("nodes:")
    for n in graph.nodes[:max_lines]:
        tail = f" -> {n.leaf}" if n.leaf else ""
        lines.append(f"  #{n.index} {n.name} <- {list(n.inputs)}{tail}")
    if len(graph) > max_lines:
        lines.append(f"  ... {len(graph) - max_lines} more")
    return "\n".join(lines)
