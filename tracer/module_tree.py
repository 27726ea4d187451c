"""The text summary: a module tree with repeated blocks folded, params (tied counted once),
output shapes and op counts."""
from __future__ import annotations

import re
from collections import Counter

from .ir import INPUT_KIND, OUTPUT_KIND, ModuleScope, Trace

_MAX_IO_LINES = 6
_MAX_INDENT = 32  # tree levels drawn with indentation; deeper levels keep the width (the text stays linear)
_INDEXED = re.compile(r"^(.*?)(\d+)$")


def module_param_counts(trace: Trace, *, at_every_alias: bool = False) -> dict[str, int]:
    """Parameters under each module address ("" is the whole model), buffers excluded.

    Each tensor counts once: at its first address, or with `at_every_alias` once under every
    module that holds one of its (tied) addresses, e.g. both an embedding and a tied LM head.
    """
    parent = _parents(trace)
    own: Counter = Counter()
    aliased = []
    for rec in trace.params.values():
        if rec.is_buffer:
            continue
        if at_every_alias and rec.tied:
            aliased.append(rec)
        else:
            own[_owner(rec.address)] += rec.numel
    totals = _rolled_up(trace, parent, own)
    for rec in aliased:
        for module in _enclosing(parent, (rec.address, *rec.tied)):
            totals[module] = totals.get(module, 0) + rec.numel
    return {a: n for a, n in totals.items() if n}


def _owner(address: str) -> str:
    return address.rpartition(".")[0]


def _parents(trace: Trace) -> dict[str, str]:
    """Module address -> the address of the module that holds it (the root holds itself out)."""
    return {child: addr for addr, scope in trace.modules.items() for child in scope.children}


def _enclosing(parent: dict[str, str], addresses: tuple[str, ...]) -> set[str]:
    """Every module that holds one of `addresses` (a parameter's aliases), root included, once."""
    found: set[str] = {""}
    for address in addresses:
        module = _owner(address)
        while module and module not in found:
            found.add(module)
            module = parent.get(module, _owner(module))
    return found


def _rolled_up(trace: Trace, parent: dict[str, str], own: dict[str, int]) -> dict[str, int]:
    """`own` counts summed up the module tree (children before parents, no recursion)."""
    totals = dict(own)
    for address in reversed(_preorder(trace)):
        if address and address in totals:
            up = parent.get(address, _owner(address))
            totals[up] = totals.get(up, 0) + totals[address]
    orphans = [a for a in own if a not in trace.modules]  # params on modules the trace has no scope for
    for address in orphans:
        module, n = _owner(address), own[address]
        while True:
            totals[module] = totals.get(module, 0) + n
            if not module:
                break
            module = _owner(module)
    return totals


def _preorder(trace: Trace) -> list[str]:
    """Module addresses from the root down (parents before children), walked iteratively."""
    if "" not in trace.modules:
        return list(trace.modules)
    order: list[str] = []
    stack = [""]
    while stack:
        address = stack.pop()
        order.append(address)
        stack.extend(reversed([c for c in trace.modules[address].children if c in trace.modules]))
    return order


def module_op_counts(trace: Trace) -> dict[str, int]:
    """Ops executed inside each module address (all calls, submodules included).

    Each call's ops are one contiguous run of op indices (`first_op`..`last_op`), so the
    count is read off the call records: linear in calls, whatever the nesting depth.
    """
    counts = {"": sum(1 for op in trace.ops if op.kind not in (INPUT_KIND, OUTPUT_KIND))}
    for address, scope in trace.modules.items():
        if not address:
            continue
        spans = sorted((c.first_op, c.last_op) for c in scope.calls if c.first_op >= 0)
        total, reach = 0, -1
        for first, last in spans:  # a module that calls itself: overlapping spans count once
            if last <= reach:
                continue
            total += last - max(first, reach + 1) + 1
            reach = last
        if total:
            counts[address] = total
    return counts


def structure_signature(trace: Trace, address: str, _memo: dict | None = None) -> tuple:
    """A hashable description of a module subtree: class, param shapes and children's signatures.

    Children appear as small integer tokens interned in `_memo`, so a signature stays shallow
    (comparable at any nesting depth); compare signatures made with the same memo only.
    """
    memo = {} if _memo is None else _memo
    if address in memo:
        return memo[address]
    tokens = memo.setdefault(_TOKENS, {})
    stack = [(address, False)]
    while stack:
        addr, ready = stack.pop()
        if addr in memo:
            continue
        scope = trace.modules[addr]
        if not ready:
            stack.append((addr, True))
            stack.extend((c, False) for c in scope.children if c not in memo)
            continue
        own = tuple((p.rsplit(".", 1)[-1], trace.params[p].shape, trace.params[p].dtype)
                    for p in scope.params if p in trace.params)
        kids = tuple((c.rsplit(".", 1)[-1], tokens.setdefault(memo[c], len(tokens))) for c in scope.children)
        memo[addr] = (scope.class_name, own, kids)
    return memo[address]


_TOKENS = object()  # the memo's key for its table of interned signatures


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
        _render_children(trace, root, max_depth, fold, params, ops, memo, lines)
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


def _render_children(trace: Trace, root: ModuleScope, max_depth: int | None, fold: bool,
                     params: dict, ops: dict, memo: dict, lines: list[str]) -> None:
    """One line per module (or folded run) below `root`, depth first, without recursion."""
    stack: list[tuple] = [(root, "", 1)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            lines.append(item)
            continue
        scope, prefix, depth = item
        if max_depth is not None and depth > max_depth:
            continue
        runs = fold_runs(trace, scope.children, memo) if fold else [[c] for c in scope.children]
        for i in reversed(range(len(runs))):  # pushed last first: popped in order, each line before its children
            run = runs[i]
            branch, extend = ("└─ ", "   ") if i == len(runs) - 1 else ("├─ ", "│  ")
            first = trace.modules[run[0]]
            if len(run) > 1:
                name, each, times = f"{first.name}-{trace.modules[run[-1]].name}", " each", f" x{len(run)}"
            else:
                name, each, times = first.name, "", ""
            deep = depth >= _MAX_INDENT  # past it, lines stop indenting and name their depth instead
            stack.append((first, prefix if deep else prefix + extend, depth + 1))
            level = f"[depth {depth}] " if deep else ""
            stack.append(f"  {prefix}{branch}{level}{name}: {first.class_name}{times}  "
                         f"{_detail(trace, first, params, ops, each)}")


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
