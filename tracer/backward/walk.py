"""Walking an autograd graph outside a capture: every node reachable from a loss, and a text sketch.

`reachable_nodes` is the one walk: the backward capture records the nodes it returns, and
`walk_grad_fn` / `sketch_grad_fn` describe any tensor's graph for debugging (no capture needed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import InvalidInputError


def reachable_nodes(root: Any) -> tuple[list[Any], dict[Any, int]]:
    """Every autograd node reachable from `root`, iteratively (any depth), root first, in discovery order."""
    nodes, index = [], {}
    stack = [root]
    while stack:
        fn = stack.pop()
        if fn is None or fn in index:
            continue
        index[fn] = len(nodes)
        nodes.append(fn)
        stack.extend(f for f, _ in reversed(fn.next_functions) if f is not None)
    return nodes, index


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
    """The graph behind `loss.grad_fn`; leaves named by their address in `model` (tied: first name)."""
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        raise InvalidInputError("the value has no grad_fn to walk", site="walk_grad_fn(loss)",
                                remedy="Pass a tensor computed with grad enabled from something requiring grad "
                                       "(not under no_grad or inference_mode, not a leaf).")
    names = {id(p): addr for addr, p in reversed(list(model.named_parameters()))} if model is not None else {}
    order, index = reachable_nodes(loss.grad_fn)
    graph = GradGraph()
    for i, fn in enumerate(order):
        var = getattr(fn, "variable", None)
        leaf = names.get(id(var), f"<leaf {tuple(var.shape)}>") if isinstance(var, torch.Tensor) else None
        inputs = tuple(index[f] for f, _ in fn.next_functions if f is not None)
        graph.nodes.append(GradNode(i, type(fn).__name__, inputs, leaf))
    return graph


def sketch_grad_fn(loss: torch.Tensor, model: nn.Module | None = None, max_lines: int = 60) -> str:
    """A text sketch of the autograd graph: node counts by kind, then the first nodes with their leaves;
    on a meta (weights-free) loss a legend line says the graph is structure only, with the ladder's wording."""
    from ..claims.ladder import ladder_headline

    graph = walk_grad_fn(loss, model)
    counts: dict[str, int] = {}
    for n in graph.nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    lines = [f"autograd graph: {len(graph)} nodes, {len(graph.leaves)} parameter leaves"]
    if loss.is_meta:  # a weights-free forward: the graph's shape is claimed, not observed
        lines.append(f"legend: structure only (meta tensors, no values); {ladder_headline('HYPOTHESIS')}")
    lines += [f"  {name} x{c}" for name, c in sorted(counts.items(), key=lambda kv: -kv[1])]
    lines.append("nodes:")
    for n in graph.nodes[:max_lines]:
        tail = f" -> {n.leaf}" if n.leaf else ""
        lines.append(f"  #{n.index} {n.name} <- {list(n.inputs)}{tail}")
    if len(graph) > max_lines:
        lines.append(f"  ... {len(graph) - max_lines} more")
    return "\n".join(lines)
