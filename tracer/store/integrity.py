"""Structural checks of a decoded trace body, in linear passes: bounds, references and the module tree.

Types were checked by decoding into the IR classes; here every number is bounded, every reference
resolves (op parents, modules, params, calls), the modules form one tree rooted at "" whose addresses
extend their parent's, and free-form values (attrs, provenance, envelope) are plain, finite and shallow.
Any failure raises `TraceStructureInvalidError` (or `TraceLimitError`) naming the record.
"""
from __future__ import annotations

import math
import operator
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, Iterable

import msgspec

from ..errors import EnvelopeClaimsMismatchError, TraceLimitError, TraceStructureInvalidError
from ..ir import ModuleScope, Op, ParamRecord
from .columns import distinct, distinct_scopes
from .format import MAX_DIM, MAX_DIMS, MAX_INT, MAX_JSON_DEPTH, MAX_JSON_INT, MAX_MODULE_DEPTH, MAX_NUMEL


def check_body(ops: tuple[Op, ...], modules: tuple[ModuleScope, ...], params: tuple[ParamRecord, ...],
               provenance: Any, envelope: Any, site: str,
               columns: Any = None) -> tuple[dict[str, ModuleScope], dict[str, ParamRecord]]:
    """Check everything (`columns`: the ops' decoded columns, whose tables give each distinct value once);
    returns the modules and params keyed by address."""
    params_by = _unique(params, "params", site)
    modules_by = _unique(modules, "modules", site)
    addresses = _param_addresses(params_by, site)
    _check_module_tree(modules_by, site)
    position = _ops_look_right(ops, modules_by, addresses, columns)
    if position is None:
        _check_ops(ops, modules_by, addresses, site)  # op by op, to name the first offending record
        raise _bad(site, "ops", "fail a structural check")
    _check_module_records(modules_by, position, addresses, site)
    check_plain(provenance, "provenance", site)
    check_plain(envelope, "envelope", site)
    check_envelope_claims(envelope, ops, params_by, modules_by, site)
    return modules_by, params_by


def check_envelope_claims(envelope: Any, ops: tuple[Op, ...], params: dict[str, ParamRecord],
                          modules: dict[str, ModuleScope], site: str) -> None:
    """Refuse an envelope whose claim table is not the one the loaded records give (re-derived here);
    a malformed envelope is left to the envelope's own checks (`tracer.claims.envelope_from_dict`)."""
    claims = envelope.get("claims") if isinstance(envelope, dict) else None
    recorded = envelope.get("claim_digests") if isinstance(envelope, dict) else None
    if not isinstance(claims, dict) or not isinstance(recorded, dict):
        return
    from ..claims.join import TABLES, claim_rows, join, plain_json
    from ..digest import canonical_rows_json, text_digest

    derived = claim_rows(ops, params.values(), modules.values())
    # The records' table digests against the recorded ones (the envelope's own check then ties them to its
    # claims): each table encoded once at msgspec speed, rows compared one by one only to name a difference.
    if all(text_digest(canonical_rows_json(derived[name])) == recorded.get(name) for name, _ in TABLES):
        return
    if any(not isinstance(claims.get(name), list) for name, _ in TABLES):
        return
    try:
        first = join(claims, derived)
    except (IndexError, TypeError, KeyError):  # rows of the wrong shape: named as the tables differing
        first = None
    else:
        if first is None:  # the rows are the records': only the recorded digests differ (the envelope's check)
            return
    where = f"{first['table']}[{first['position']}]" if first and first.get("position") is not None else "the tables"
    raise EnvelopeClaimsMismatchError(
        f"{site}: the evidence envelope's claims do not match the saved records (first at {where}: "
        f"{first.get('reason') if first else 'rows differ'})", site=f"{site}: envelope",
        contradiction=plain_json(first) if first else None,
        claimed_counts={name: len(claims[name]) for name, _ in TABLES},
        record_counts={name: len(derived[name]) for name, _ in TABLES})


def _bad(site: str, where: str, what: str) -> TraceStructureInvalidError:
    return TraceStructureInvalidError(f"{site}: {where} {what}", site=f"{site}: {where}")


def _unique(records: tuple, name: str, site: str) -> dict:
    by = {r.address: r for r in records}
    if len(by) != len(records):
        raise _bad(site, name, "lists an address twice")
    return by


def _shape(shape: tuple, where: str, site: str) -> None:
    if len(shape) > MAX_DIMS:
        raise TraceLimitError(f"{site}: {where} has {len(shape)} dimensions", site=f"{site}: {where}")
    numel = 1
    for d in shape:
        if d < 0 or d > MAX_DIM:
            raise _bad(site, where, f"has a dimension of {d} (0 to {MAX_DIM} allowed)")
        numel *= d
    if numel > MAX_NUMEL:
        raise TraceLimitError(f"{site}: {where} has {numel:,} elements", site=f"{site}: {where}")


def _count(value: int, where: str, site: str, low: int = 0) -> None:
    if not low <= value <= MAX_INT:
        raise _bad(site, where, f"is {value} (expected {low} to {MAX_INT})")


def _param_addresses(params: dict[str, ParamRecord], site: str) -> frozenset[str]:
    """Every address a parameter answers to (its own and its tied aliases)."""
    names = set(params)
    for addr, rec in params.items():
        where = f"params[{addr!r}]"
        _shape(rec.shape, where + ".shape", site)
        for alias in rec.tied:
            if alias in names:
                raise _bad(site, where, f"ties {alias!r}, which is already an address")
            names.add(alias)
    return frozenset(names)


def _check_module_tree(modules: dict[str, ModuleScope], site: str) -> None:
    """One tree rooted at "": each module is the child of exactly one parent, addresses extend the parent's."""
    if not modules:
        return
    if "" not in modules:
        raise _bad(site, "modules", 'have no root module ""')
    seen = {""}
    level = [""]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_MODULE_DEPTH:
            raise TraceLimitError(f"{site}: modules nest deeper than {MAX_MODULE_DEPTH}", site=f"{site}: modules")
        below = []
        for addr in level:
            prefix = addr + "." if addr else ""
            for child in modules[addr].children:
                where = f"modules[{addr!r}].children"
                if child not in modules:
                    raise _bad(site, where, f"names {child!r}, which is not a module")
                name = child[len(prefix):]
                if not child.startswith(prefix) or not name or "." in name:
                    raise _bad(site, where, f"names {child!r}, which is not a direct sub-address")
                if child in seen:
                    raise _bad(site, where, f"names {child!r} a second time (the modules are not a tree)")
                seen.add(child)
                below.append(child)
        level = below
    if len(seen) != len(modules):
        stray = next(a for a in modules if a not in seen)
        raise _bad(site, f"modules[{stray!r}]", "is not reachable from the root module")


def _ops_look_right(ops: tuple[Op, ...], modules: dict[str, ModuleScope], params: frozenset[str],
                    columns: Any = None) -> dict[str, int] | None:
    """Every op check of `_check_ops`, column by column (C-level iteration over 100,000s of ops), each
    distinct value (shape, module stack, source line, call template) once.

    Returns each label's position when all hold, else None.
    """
    n = len(ops)
    position = dict(zip(map(_LABEL, ops), range(n)))
    if len(position) != n or (columns is None and list(map(_INDEX, ops)) != list(range(n))):
        return None
    sources = map(_EDGE_SOURCE, chain.from_iterable(map(_PARENTS_OF, ops)))
    readers = chain.from_iterable(map(repeat, range(n), map(len, map(_PARENTS_OF, ops))))
    if any(map(operator.ge, map(position.get, sources, repeat(n)), readers)):  # a parent must precede its reader
        return None
    call_ids, n_out, out_idx = list(map(_CALL_ID, ops)), list(map(_N_OUT, ops)), list(map(_OUT_IDX, ops))
    if n and (min(call_ids) < 0 or max(call_ids) > MAX_INT or min(n_out) < 1 or max(n_out) > MAX_INT
              or min(out_idx) < 0 or any(map(operator.ge, out_idx, n_out))):
        return None
    try:
        for shape in set(map(_SHAPE, filter(None, _distinct(ops, columns, "out")))):
            _shape(shape, "", "")
        enclosing: dict = {}
        scopes = (set(zip(map(_MODULE, ops), map(_MODULE_CALL, ops), map(_STACK, ops))) if columns is None
                  else distinct_scopes(columns))
        for module, call, stack in scopes:
            _check_stack(stack, modules, enclosing, "", "")
            if (stack and (module, call) != stack[-1]) or (not stack and (module != "" or call != 0)):
                return None
        lines = list(map(_LINE, filter(None, _distinct(ops, columns, "source"))))
        if lines and (min(lines) < 0 or max(lines) > MAX_INT):
            return None
        attrs = filter(None, map(_ATTRS, ops)) if columns is None else filter(None, distinct(columns, "attrs"))
        for value in distinct_plain(attrs):
            check_plain(value, "", "")
    except (TraceStructureInvalidError, TraceLimitError):
        return None
    used = set().union(*_distinct(ops, columns, "params"), *_distinct(ops, columns, "buffer_writes"))
    return position if used <= params else None


def _distinct(ops: tuple[Op, ...], columns: Any, name: str) -> Iterable[Any]:
    """The distinct values of the ops' hashable field `name`: from its column's table when there is one."""
    return set(map(attrgetter(name), ops)) if columns is None else distinct(columns, name)


_PARENTS_OF, _EDGE_SOURCE, _SHAPE, _LINE = attrgetter("parents"), attrgetter("source"), attrgetter("shape"), attrgetter("line")
_LABEL, _INDEX, _CALL_ID, _N_OUT, _OUT_IDX, _OUT, _MODULE, _MODULE_CALL, _STACK, _SOURCE, _ATTRS, _PARAMS, _WRITES = (
    attrgetter(name) for name in ("label", "index", "func_call_id", "num_outputs", "output_index", "out", "module",
                                  "module_call", "module_stack", "source", "attrs", "params", "buffer_writes"))


def _check_ops(ops: tuple[Op, ...], modules: dict[str, ModuleScope], params: frozenset[str], site: str) -> None:
    labels: set[str] = set()
    shapes_ok: set[tuple] = set()
    stacks_ok: set[tuple] = set()
    enclosing: dict[tuple[str, int], tuple[str, int] | None] = {}  # each module call runs inside one other
    for i, op in enumerate(ops):
        where = f"ops[{i}]"
        if op.index != i:
            raise _bad(site, where, f"has index {op.index} (ops are stored in execution order)")
        if op.label in labels:
            raise _bad(site, where, f"repeats the label {op.label!r}")
        for edge in op.parents:
            if edge.source not in labels:
                raise _bad(site, where, f"reads {edge.source!r}, which does not precede it")
        if op.out is not None and op.out.shape not in shapes_ok:
            _shape(op.out.shape, where + ".out.shape", site)
            shapes_ok.add(op.out.shape)
        _count(op.func_call_id, where + ".func_call_id", site)
        _count(op.num_outputs, where + ".num_outputs", site, low=1)
        if not 0 <= op.output_index < op.num_outputs:
            raise _bad(site, where, f"has output_index {op.output_index} of {op.num_outputs} outputs")
        stack = op.module_stack
        if stack not in stacks_ok:
            _check_stack(stack, modules, enclosing, where, site)
            stacks_ok.add(stack)
        if stack:
            if (op.module, op.module_call) != stack[-1]:
                raise _bad(site, where, "has a module that is not the innermost of its module_stack")
        elif op.module != "" or op.module_call != 0:
            raise _bad(site, where, "names a module but has an empty module_stack")
        for addr in op.params:
            if addr not in params:
                raise _bad(site, where, f"consumes unknown parameter {addr!r}")
        for addr in op.buffer_writes:
            if addr not in params:
                raise _bad(site, where, f"writes unknown buffer {addr!r}")
        if op.source is not None:
            _count(op.source.line, where + ".source.line", site)
        if op.attrs:
            check_plain(op.attrs, where + ".attrs", site)
        labels.add(op.label)


def _check_stack(stack: tuple, modules: dict[str, ModuleScope], enclosing: dict, where: str, site: str) -> None:
    """Known modules, bounded depth, and one nesting: a module call sits inside the same call in every op."""
    if len(stack) > MAX_MODULE_DEPTH:
        raise TraceLimitError(f"{site}: {where}.module_stack is deeper than {MAX_MODULE_DEPTH}", site=f"{site}: {where}")
    outer = None
    for entry in stack:
        addr, call = entry
        if addr not in modules:
            raise _bad(site, where, f"runs inside unknown module {addr!r}")
        _count(call, where + ".module_stack call", site)
        if enclosing.setdefault(entry, outer) != outer or entry == outer:
            raise _bad(site, where, f"places the call {addr!r}:{call} inside a different enclosing call than "
                                    f"other ops do")
        outer = entry
    if len(set(stack)) != len(stack):
        raise _bad(site, where, "lists one module call twice in its module_stack")


def _check_module_records(modules: dict[str, ModuleScope], labels: dict[str, int], params: frozenset[str],
                          site: str) -> None:
    last = len(labels) - 1
    for addr, scope in modules.items():
        where = f"modules[{addr!r}]"
        for p in scope.params:
            if p not in params:
                raise _bad(site, where, f"owns unknown parameter {p!r}")
        for call in scope.calls:
            _count(call.call, where + ".calls.call", site)
            if not ((call.first_op == call.last_op == -1) or 0 <= call.first_op <= call.last_op <= last):
                raise _bad(site, where, f"has a call spanning ops {call.first_op}..{call.last_op}")
            for label in (*call.inputs, *call.outputs):
                if label not in labels:
                    raise _bad(site, where, f"has a call reading or giving unknown op {label!r}")


def distinct_plain(values: Iterable[Any]) -> Iterable[Any]:
    """One of each distinct decoded JSON value (equal JSON text passes `check_plain` alike), made at C speed.

    For values decoded from JSON only (where a list is never a tuple and every float is finite): an
    op-dense trace repeats a handful of call templates 100,000s of times.
    """
    values = list(values)
    try:
        return dict(zip(map(_JSON_TEXT, values), values)).values()
    except (TypeError, ValueError, OverflowError, RecursionError):  # not plain: let check_plain name it
        return values


_JSON_TEXT = msgspec.json.encode


def check_plain(value: Any, where: str, site: str) -> None:
    """Free-form JSON data: finite numbers, bounded integers, nesting at most MAX_JSON_DEPTH (iterative)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth >= MAX_JSON_DEPTH:
                raise TraceLimitError(f"{site}: {where} nests deeper than {MAX_JSON_DEPTH}", site=f"{site}: {where}")
            stack.extend((v, depth + 1) for v in (item.values() if kind is dict else item))
        elif kind is float:
            if not math.isfinite(item):
                raise _bad(site, where, "holds a number that is not finite")
        elif kind is int:
            if abs(item) > MAX_JSON_INT:
                raise _bad(site, where, f"holds an integer beyond {MAX_JSON_INT}")
        elif item is not None and kind is not str and kind is not bool:
            raise _bad(site, where, f"holds a {kind.__name__}")
