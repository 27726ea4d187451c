"""The text summary: a module tree with repeated blocks folded, params (tied counted once),
output shapes and op counts."""
from __future__ import annotations

import re
from collections import Counter

from .ir import INPUT_KIND, OUTPUT_KIND, ModuleScope, Trace

_MAX_IO_LINES = 6
_INDEXED = re.compile(r"^(.*?)(\d+)$")


def module_param_counts(trace: Trace, *, at_every_alias: bool = False) -> dict[str, int]:
    """Parameters under each module address ("" is the whole model), buffers excluded.

    Each tensor counts once: at its first address, or with `at_every_alias` once under every
    module that holds one of its (tied) addresses, e.g. both an embedding and a tied LM head.
    """
    counts: Counter = Counter()
    for rec in trace.params.values():
        if rec.is_buffer:
            continue
        prefixes = {""}
        for address in (rec.address, *rec.tied) if at_every_alias else (rec.address,):
            parts = address.split(".")[:-1]
            prefixes.update(".".join(parts[:d]) for d in range(1, len(parts) + 1))
        for prefix in prefixes:
            counts[prefix] += rec.numel
    return dict(counts)


def module_op_counts(trace: Trace) -> dict[str, int]:
    """Ops executed inside each module address (all calls, submodules included)."""
    counts: Counter = Counter()
    for op in trace.ops:
        if op.kind in (INPUT_KIND, OUTPUT_KIND):
            continue
        counts[""] += 1
        for addr, _call in op.module_stack:
            if addr:
                counts[addr] += 1
    return dict(counts)


def structure_signature(trace: Trace, address: str, _memo: dict | None = None) -> tuple:
    """A hashable description of a module subtree: classes, param shapes and children, recursively."""
    memo = {} if _memo is None else _memo
    if address in memo:
        return memo[address]
    scope = trace.modules[address]
    own = tuple((p.rsplit(".", 1)[-1], trace.params[p].shape, trace.params[p].dtype)
                for p in scope.params if p in trace.params)
    kids = tuple((c.rsplit(".", 1)[-1], structure_signature(trace, c, memo)) for c in scope.children)
    sig = (scope.class_name, own, kids)
    memo[address] = sig
    return sig


def fold_runs(trace: Trace, children: tuple[str, ...], memo: dict | None = None) -> list[list[str]]:
    """Group consecutive numbered siblings with identical structure: [[h.0, ..., h.11], [ln_f]]."""
    memo = {} if memo is None else memo
    runs: list[list[str]] = []
    for child in children:
        if runs and _same_run(trace, runs[-1][-1], child, memo):
            runs[-1].append(child)
        else:
            runs.append([child])
    return runs


def _same_run(trace: Trace, a: str, b: str, memo: dict) -> bool:
    ma, mb = _INDEXED.match(a), _INDEXED.match(b)
    if not (ma and mb) or ma.group(1) != mb.group(1):
        return False
    return structure_signature(trace, a, memo) == structure_signature(trace, b, memo)


def render_summary(trace: Trace, *, max_depth: int | None = None, fold: bool = True) -> str:
    """The module tree of `trace` as text (see module docstring)."""
    params = module_param_counts(trace)
    ops = module_op_counts(trace)
    memo: dict = {}
    lines = [
        f"{trace.model_class}  [{trace.ladder_state}]",
        f"  {trace.param_count():,} parameters (tied counted once), {len(trace.ops):,} ops, "
        f"{trace.num_edges:,} edges",
    ]
    for op in trace.inputs:
        lines.append(f"  input  {op.io_path or op.label}: {_shape(op)}")
    root = trace.modules.get("")
    if root is not None:
        _render_children(trace, root, "", 1, max_depth, fold, params, ops, memo, lines)
    outputs = trace.outputs
    for op in outputs[:_MAX_IO_LINES]:
        lines.append(f"  output {op.io_path or op.label}: {_shape(op)}")
    if len(outputs) > _MAX_IO_LINES:
        lines.append(f"  ... and {len(outputs) - _MAX_IO_LINES} more outputs")
    tied = [(r.address, r.tied) for r in trace.params.values() if r.tied]
    for addr, others in tied:
        lines.append(f"  tied: {', '.join(others)} = {addr} (counted once)")
    for warning in trace.warnings:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def _render_children(trace: Trace, scope: ModuleScope, prefix: str, depth: int, max_depth: int | None,
                     fold: bool, params: dict, ops: dict, memo: dict, lines: list[str]) -> None:
    if max_depth is not None and depth > max_depth:
        return
    runs = fold_runs(trace, scope.children, memo) if fold else [[c] for c in scope.children]
    for i, run in enumerate(runs):
        last = i == len(runs) - 1
        branch, extend = ("└─ ", "   ") if last else ("├─ ", "│  ")
        first = trace.modules[run[0]]
        if len(run) > 1:
            name = f"{first.name}-{trace.modules[run[-1]].name}"
            each = " each"
            times = f" x{len(run)}"
        else:
            name, each, times = first.name, "", ""
        detail = _detail(trace, first, params, ops, each)
        lines.append(f"  {prefix}{branch}{name}: {first.class_name}{times}  {detail}")
        _render_children(trace, first, prefix + extend, depth + 1, max_depth, fold, params, ops, memo, lines)


def _detail(trace: Trace, scope: ModuleScope, params: dict, ops: dict, each: str) -> str:
    parts = []
    n_params = params.get(scope.address, 0)
    if n_params:
        parts.append(f"{n_params:,} params{each}")
    out = _module_output_shape(trace, scope)
    if out:
        parts.append(f"out {out}")
    n_ops = ops.get(scope.address, 0)
    calls = len(scope.calls)
    if n_ops:
        parts.append(f"{n_ops} op{'s' if n_ops != 1 else ''}{each}")
    if calls > 1:
        parts.append(f"called {calls}x")
    if not calls and not n_ops and not any(trace.modules[c].calls for c in scope.children):
        parts.append("not called")
    return " · ".join(parts)


def _module_output_shape(trace: Trace, scope: ModuleScope) -> str:
    for call in scope.calls:
        for label in call.outputs:
            op = trace[label]
            if op.out is not None:
                return "(" + ", ".join(str(d) for d in op.out.shape) + ")"
    return ""


def _shape(op) -> str:
    if op.out is None:
        return "?"
    return f"({', '.join(str(d) for d in op.out.shape)}) {op.out.dtype}"
