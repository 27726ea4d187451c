"""Pairing the ops of two traces by where they ran, not by label text.

An op's key is (innermost module, its call index, function, ordinal of that function within the
call, output index); inputs and outputs are keyed by where they sit in the inputs or the output.
Inserting a layer therefore adds that layer's keys and leaves every other key, and its match, alone.
Ops left over inside one module call are paired in order when both sides left the same number
(one function swapped for another); the rest are added or removed.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..ir import INPUT_KIND, OUTPUT_KIND, Op, Trace


@dataclass(frozen=True, slots=True)
class Matching:
    """Matched op pairs (side a, side b) in a's order, and the ops present on one side only."""

    pairs: tuple[tuple[Op, Op], ...]
    removed: tuple[Op, ...]
    added: tuple[Op, ...]


def op_keys(trace: Trace) -> dict[tuple, Op]:
    """Every op of `trace` under its matching key."""
    seen: dict[tuple, int] = defaultdict(int)
    keys: dict[tuple, Op] = {}
    for op in trace.ops:
        if op.kind in (INPUT_KIND, OUTPUT_KIND):
            base: tuple = ("io", op.kind, op.io_path)
        else:
            base = (op.module, op.module_call, op.func, op.output_index)
        ordinal = seen[base]
        seen[base] = ordinal + 1
        keys[(*base, ordinal)] = op
    return keys


def match_ops(a: Trace, b: Trace) -> Matching:
    """Pair the ops of `a` and `b` (see the module docstring)."""
    keys_a, keys_b = op_keys(a), op_keys(b)
    pairs: dict[int, tuple[Op, Op]] = {}
    left_a: dict[tuple, list[Op]] = defaultdict(list)
    for key, op in keys_a.items():
        other = keys_b.get(key)
        if other is not None:
            pairs[op.index] = (op, other)
        else:
            left_a[_call_of(op)].append(op)
    taken = {id(p[1]) for p in pairs.values()}
    left_b: dict[tuple, list[Op]] = defaultdict(list)
    for op in b.ops:
        if id(op) not in taken:
            left_b[_call_of(op)].append(op)
    removed: list[Op] = []
    added: list[Op] = []
    for call, ops_a in left_a.items():
        ops_b = left_b.get(call, [])
        if len(ops_a) == len(ops_b) and call[0] != "io":
            for x, y in zip(ops_a, ops_b):
                pairs[x.index] = (x, y)
            left_b.pop(call, None)
        else:
            removed.extend(ops_a)
    for ops_b in left_b.values():
        added.extend(ops_b)
    return Matching(tuple(pairs[i] for i in sorted(pairs)), tuple(sorted(removed, key=_index)),
                    tuple(sorted(added, key=_index)))


def _call_of(op: Op) -> tuple:
    if op.kind in (INPUT_KIND, OUTPUT_KIND):
        return ("io", op.kind)
    return (op.module, op.module_call)


def _index(op: Op) -> int:
    return op.index
