"""Pairing the ops of two traces by where they ran, not by label text.

An op's key is (innermost module, its call index, function, ordinal of that function within the
call, output index); inputs and outputs are keyed by where they sit in the inputs or the output.
Inserting a layer therefore adds that layer's keys and leaves every other key, and its match, alone.
Ops left over inside one module call are paired in order when both sides left the same number
(one function swapped for another); the rest are added or removed.

A module that ran more than once is paired call by call in order, except where each of its calls
read parameters of its own on both sides: then calls pair by those parameters (transformers' rotary
embedding runs once per attention type, in an order that follows the process's string hashing).
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


def op_keys(trace: Trace, calls: dict[tuple[str, int], int] | None = None) -> dict[tuple, Op]:
    """Every op of `trace` under its matching key (`calls`: module calls renumbered, see `call_pairing`)."""
    seen: dict[tuple, int] = defaultdict(int)
    keys: dict[tuple, Op] = {}
    for op in trace.ops:
        if op.kind in (INPUT_KIND, OUTPUT_KIND):
            base: tuple = ("io", op.kind, op.io_path)
        else:
            base = (*_call_of(op, calls), op.func, op.output_index)
        ordinal = seen[base]
        seen[base] = ordinal + 1
        keys[(*base, ordinal)] = op
    return keys


def match_ops(a: Trace, b: Trace) -> Matching:
    """Pair the ops of `a` and `b` (see the module docstring)."""
    calls = call_pairing(a, b)
    keys_a, keys_b = op_keys(a), op_keys(b, calls)
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
            left_b[_call_of(op, calls)].append(op)
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


def call_pairing(a: Trace, b: Trace) -> dict[tuple[str, int], int]:
    """b's module calls renumbered as a's, where they differ: for a module that ran more than once on both
    sides, when every call on each side read a set of parameters no other call of it read, and both
    sides hold the same sets, calls pair by those sets rather than by their order."""
    read_a, read_b = _params_read_per_call(a), _params_read_per_call(b)
    renumbered: dict[tuple[str, int], int] = {}
    for address, calls_b in read_b.items():
        calls_a = read_a.get(address, {})
        if len(calls_b) < 2 or len(calls_a) != len(calls_b):
            continue
        by_params = {params: call for call, params in calls_a.items()}
        if (len(by_params) != len(calls_a) or frozenset() in by_params
                or set(by_params) != set(calls_b.values()) or len(set(calls_b.values())) != len(calls_b)):
            continue
        for call, params in calls_b.items():
            if by_params[params] != call:
                renumbered[(address, call)] = by_params[params]
    return renumbered


def _params_read_per_call(trace: Trace) -> dict[str, dict[int, frozenset]]:
    """Module address -> call -> the parameters and buffers that call's own ops read."""
    read: dict[str, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for op in trace.ops:
        if op.kind not in (INPUT_KIND, OUTPUT_KIND):
            read[op.module][op.module_call].update(op.params)
    return {address: {call: frozenset(p) for call, p in calls.items()} for address, calls in read.items()}


def _call_of(op: Op, calls: dict[tuple[str, int], int] | None = None) -> tuple:
    """(module, call) of an op, its call renumbered by `calls` (`call_pairing`); ("io", kind) for inputs and outputs."""
    if op.kind in (INPUT_KIND, OUTPUT_KIND):
        return ("io", op.kind)
    call = (op.module, op.module_call)
    return (op.module, calls[call]) if calls and call in calls else call


def _index(op: Op) -> int:
    return op.index
