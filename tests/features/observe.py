"""What a forward computes, observed without the tracer, and what a trace is missing against it.

`ParamReads` is the sweep's own `TorchFunctionMode`: run around a plain eager forward it records
which parameters and buffers (by object identity) any torch call received. `gaps` compares a trace
with that observation and with the case's own expectations; a non-empty list means the trace
misses computation, whatever the trace itself claims.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

FRAME_KINDS = ("input", "output")
INVENTED = ("ops consume parameters the model does not have", "op kinds differ from the plain eager twin's "
            "capture: extra")  # gaps that add computation rather than lose it


OPAQUE = " (packed)"  # marks a read of packed state (a ScriptObject such as quantized weights), not a tensor


def state_names(model: nn.Module) -> dict[int, str]:
    """id of each parameter, buffer and packed-state object (`torch.ScriptObject` attribute) of `model` -> its
    first address; a packed one's address ends with OPAQUE."""
    names: dict[int, str] = {}
    for name, t in list(model.named_parameters(remove_duplicate=False)) + \
            list(model.named_buffers(remove_duplicate=False)):
        names.setdefault(id(t), name)
    for prefix, module in model.named_modules(remove_duplicate=False):
        for attr, value in vars(module).items():
            if isinstance(value, torch.ScriptObject):
                names.setdefault(id(value), f"{prefix}.{attr}".lstrip(".") + OPAQUE)
    return names


class ParamReads(TorchFunctionMode):
    """Records the addresses of `model`'s parameters and buffers that torch calls receive."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.names = state_names(model)
        self.read: set[str] = set()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        self.calls += 1
        for leaf in tree_leaves((args, kwargs)):
            if isinstance(leaf, (torch.Tensor, torch.ScriptObject)):
                name = self.names.get(id(leaf))
                if name is not None:
                    self.read.add(name)
        return func(*args, **kwargs)


def _matches(recorded: str, name: str) -> bool:
    """`recorded` (a trace's parameter address) names `name`; packed state counts as read when the trace
    attributes anything of its layer (the address before its first private segment: `fc1` of
    `fc1._packed_params._packed_params`), since the tracer may name it either way."""
    if name.endswith(OPAQUE):
        parts = name[: -len(OPAQUE)].split(".")
        layer = ".".join(parts[: next((i for i, p in enumerate(parts) if p.startswith("_")), len(parts))])
        return not layer or recorded == layer or recorded.startswith(layer + ".") or f".{layer}." in recorded
    return recorded == name or recorded.endswith("." + name)


def _ancestors(trace: Any, label: str) -> Iterable[Any]:
    seen, stack = set(), [label]
    while stack:
        op = trace[stack.pop()]
        for edge in op.parents:
            if edge.source not in seen:
                seen.add(edge.source)
                stack.append(edge.source)
                yield trace[edge.source]


def kinds(trace: Any) -> Counter:
    """Op kinds of a trace, without its input and output frame ops."""
    return Counter(op.kind for op in trace.ops if op.kind not in FRAME_KINDS)


def gaps(trace: Any, reads: set[str], own: set[str], expect: tuple[str, ...] = (),
         twin: Counter | None = None) -> list[str]:
    """What `trace` misses or invents: parameters the plain forward read that no op consumed, an output
    not computed from an input or a parameter, an expected op kind absent, op kinds unlike the twin's,
    consumed parameters the model does not have (`own`: the captured model's addresses)."""
    found: list[str] = []
    consumed = {p for op in trace.ops for p in op.params}
    missing = sorted(n for n in reads if not any(_matches(p, n) for p in consumed))
    if missing:
        found.append(f"parameters read by the plain forward but consumed by no op: {', '.join(missing)}")
    foreign = sorted(p for p in consumed if not any(_matches(p, n) or _matches(n, p) for n in own))
    if foreign:
        found.append(f"ops consume parameters the model does not have: {', '.join(foreign[:5])}")
    outputs = [op for op in trace.ops if op.kind == "output"]
    if not outputs:
        found.append("no output op recorded")
    for op in outputs:
        if not any(a.kind == "input" or a.params for a in _ancestors(trace, op.label)):
            found.append(f"output {op.label} is computed from neither an input nor a parameter (a constant)")
    texts = [f"{op.kind} {op.func}".lower() for op in trace.ops]
    absent = [e for e in expect if not any(e in t for t in texts)]
    if absent:
        found.append(f"expected op kinds not recorded: {', '.join(absent)}")
    if twin is not None:
        mine = kinds(trace)
        if mine != twin:
            lost, extra = twin - mine, mine - twin
            parts = ([f"extra {dict(sorted(extra.items()))}"] if extra else []) + \
                ([f"missing {dict(sorted(lost.items()))}"] if lost else [])
            found.append("op kinds differ from the plain eager twin's capture: " + "; ".join(parts))
    return found
