"""Offline check of a saved backward: each op's vector-Jacobian product recomputed from saved values.

A reloaded trace keeps its forward values and its op-output and parameter gradients, not its autograd
nodes. This check calls each op again from its stored call template (`tracer.replay.offline`), with
its inputs and parameters as fresh leaves, and asks autograd for the gradients its saved output
gradient sends to them. Summed over every op that reads it, that must be the gradient saved for the
op (or parameter) it reads: checked where every reader was replayed with a saved output gradient, to
a tolerance (the sum runs in another order than the engine's), and listed as skipped otherwise.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from ..errors import ReplayUnavailableError
from ..ir import Op

RTOL, ATOL = 1e-4, 1e-6  # relative to the compared gradient's largest magnitude


@dataclass(frozen=True)
class OfflineBackwardReport:
    """Gradients checked offline: op outputs and parameters matched, skipped (why), and mismatches."""

    ops_replayed: int
    checked: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)
    findings: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not self.findings


def validate_backward_offline(trace: Any, params: Any = None) -> OfflineBackwardReport:
    """Check a reloaded backward's saved gradients against the ops' recomputed vector-Jacobian products."""
    from ..replay.offline import NotReplayable, OfflineCalls, has_call_templates

    bw = getattr(trace, "backward", None)
    if bw is None or not bw.grads or not trace.values or not has_call_templates(trace):
        raise ReplayUnavailableError("this trace holds no saved backward to check offline (it needs saved values, "
                                     "call templates and op-output gradients)", site="validate_backward_offline(trace)",
                                     remedy="Capture with CaptureOptions(backward=True) and save='all', then save.")
    named = dict(params.named_parameters()) if isinstance(params, torch.nn.Module) else dict(params or {})
    leaves = {k: v.detach().requires_grad_(v.is_floating_point()) for k, v in trace.values.items()}
    calls = OfflineCalls(_WithValues(trace, leaves), named)
    aliases = {alias: rec.address for rec in trace.params.values() for alias in rec.tied}
    by_storage = {(t.data_ptr(), tuple(t.shape)): f"param:{aliases.get(a, a)}" for a, t in named.items()}
    outputs = Counter(op.func_call_id for op in trace.ops)
    sums: dict[str, torch.Tensor] = {}
    blocked: dict[str, str] = {}  # a label or parameter whose incoming gradient is not fully known, and why
    replayed = 0
    for op in trace.ops:
        readers = [e.source for e in op.parents] + [f"param:{aliases.get(a, a)}" for a in op.params]
        why = _unreplayable(op, bw, outputs)
        if why is None:
            try:
                func, args, kwargs = calls.call(op)
                with torch.enable_grad():
                    out = func(*args, **kwargs)
                    out = out if isinstance(out, torch.Tensor) else None
                    why = _accumulate(op, out, bw.grads[op.label], args, kwargs, leaves, by_storage, sums)
                replayed += why is None
            except (NotReplayable, RuntimeError, TypeError, ValueError) as exc:
                why = f"not replayed ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
        if why is not None:
            for r in readers:
                blocked.setdefault(r, f"{op.label}: {why}")
    checked, skipped, findings = [], {}, {}
    targets = {label: g for label, g in bw.grads.items()} | {f"param:{a}": g for a, g in bw.param_grads.items()}
    for key, saved in targets.items():
        if key in blocked or key not in sums:
            skipped[key] = blocked.get(key, "no replayed op reads it (the loss, or an unread output)")
            continue
        got = sums[key]
        if got.shape != saved.shape:
            got = got.sum_to_size(saved.shape) if _sums_to(got, saved.shape) else got
        checked.append(key)
        diff = (got.double() - saved.double()).abs().max().item() if got.shape == saved.shape else float("inf")
        bound = ATOL + RTOL * saved.double().abs().max().item()
        if not diff <= bound:
            findings[key] = f"recomputed gradient differs from the saved one (max abs diff {diff:.3e} > {bound:.3e})"
    return OfflineBackwardReport(replayed, tuple(checked), skipped, findings)


class _WithValues:
    """The trace as OfflineCalls reads it, with its values replaced by gradient leaves."""

    def __init__(self, trace: Any, values: Mapping[str, torch.Tensor]) -> None:
        self.values, self.params, self.ops = values, trace.params, trace.ops


def _unreplayable(op: Op, bw: Any, outputs: Counter) -> str | None:
    if op.kind in ("input", "output", "constant"):
        return "not an op"
    if op.label not in bw.grads:
        return "its output gradient was not saved"
    if outputs[op.func_call_id] > 1:
        return "a call with several outputs (only the first output's gradient is saved)"
    name = op.func.rsplit(".", 1)[-1]
    if (name.endswith("_") and not name.endswith("__")) or name.startswith("__i") or name == "__setitem__":
        return "an in-place op"
    return None


def _accumulate(op: Op, out: Any, grad: torch.Tensor, args: tuple, kwargs: dict, leaves: Mapping[str, torch.Tensor],
                by_storage: Mapping[tuple, str], sums: dict[str, torch.Tensor]) -> str | None:
    """Add the op's vector-Jacobian product to every input and parameter it read (None: done)."""
    if out is None or out.grad_fn is None or out.shape != grad.shape:
        return "no differentiable output of the recorded shape"
    keys = {id(leaves[e.source]): e.source for e in op.parents if e.source in leaves}
    for t in _tensors(args, kwargs):  # a parameter: a leaf over the storage of the one supplied
        key = by_storage.get((t.data_ptr(), tuple(t.shape))) if id(t) not in keys else None
        if key is not None:
            keys[id(t)] = key
    inputs = [t for t in _tensors(args, kwargs) if id(t) in keys and t.requires_grad]
    if not inputs:
        return None
    unique = list({id(t): t for t in inputs}.values())
    grads = torch.autograd.grad(out, unique, grad, allow_unused=True)
    for t, g in zip(unique, grads):
        if g is not None:
            key = keys[id(t)]
            sums[key] = sums[key] + g if key in sums else g
    return None


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out, stack = [], [*args, *kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            stack.extend(a)
    return out


def _sums_to(t: torch.Tensor, shape: tuple) -> bool:
    try:
        t.sum_to_size(shape)
    except RuntimeError:
        return False
    return True
