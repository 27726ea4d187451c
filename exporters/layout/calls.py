"""Expansion entries for one call of a module called more than once (a looped block).

An expansion set holds module addresses (`block`: every call drawn open) and call entries:
`block#` lists the calls of a looped module as separate boxes, `block#2` draws its third call open
(and lists the calls). A module called several times under one parent with none of these entries
draws as one "x N calls" box.
"""
from __future__ import annotations

from typing import Iterable

SEP = "#"


def call_entry(address: str, call: int | None = None) -> str:
    """`block#2` opens call 2 of `block`; `block#` (call None) lists its calls unopened."""
    return f"{address}{SEP}{'' if call is None else call}"


def split_entry(entry: str) -> tuple[str, int | None, bool]:
    """(address, call or None, is a call entry); a malformed call part reads as call -1."""
    address, sep, call = entry.partition(SEP)
    if not sep:
        return address, None, False
    if not call:
        return address, None, True
    return address, int(call) if call.isdigit() else -1, True


def call_entries(expanded: Iterable[str]) -> frozenset[str]:
    """The call entries of an expansion set (empty for a set of plain addresses)."""
    return frozenset(e for e in expanded if SEP in e)


def toggle_call(expanded: frozenset[str], address: str, call: int, n_calls: int) -> frozenset[str]:
    """Open call `call` of `address` if it is closed, else close it (the other calls keep their state)."""
    if address in expanded:  # every call was open: keep the others open, close this one
        others = {call_entry(address, k) for k in range(n_calls) if k != call}
        return (expanded - {address}) | others | {call_entry(address)}
    entry = call_entry(address, call)
    if entry in expanded:
        return expanded - {entry}
    return expanded | {entry, call_entry(address)}


def fold_calls(expanded: frozenset[str], address: str) -> frozenset[str]:
    """Fold a looped module back into one box: drop its address and every call entry of it."""
    prefix = call_entry(address)
    return frozenset(e for e in expanded if e != address and not e.startswith(prefix))


def toggle_module(expanded: frozenset[str], address: str, n_calls: int, call: int | None = None) -> frozenset[str]:
    """Toggle a module box or frame: one call of a module called more than once (`call` given), a looped
    module's box (lists its calls, or folds them back), else the plain address."""
    if n_calls > 1 and call is not None:
        return toggle_call(expanded, address, call, n_calls)
    if n_calls > 1:
        prefix = call_entry(address)
        listed = address in expanded or any(e.startswith(prefix) for e in expanded)
        return fold_calls(expanded, address) if listed else expanded | {prefix}
    return expanded - {address} if address in expanded else expanded | {address}


def path_entries(address: str, stack: Iterable[tuple[str, int]], modules: dict) -> set[str]:
    """Entries that open `address` and every module above it; a module called more than once opens
    only the call in `stack` (the op's module calls); `modules` is the trace's address -> scope."""
    parts = address.split(".") if address else []
    wanted = {""} | {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    looped = {a: c for a, c in stack if len(getattr(modules.get(a), "calls", ())) > 1}
    out = set()
    for a in wanted:
        if a in looped:
            out |= {call_entry(a), call_entry(a, looped[a])}
        else:
            out.add(a)
    return out
