"""Claim tables and their positional join: the structural facts a trace asserts, row by row.

A claim row is device-free (meta and real twins must agree on everything but values and device).
The join compares record counts, then rows in order, naming the first differing position and
field. Table digests (`table_digests`) seal a saved envelope's claims; the join needs none.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from ..digest import canonical_digest
from ..ir import Trace

OP_FIELDS = ("label", "kind", "func", "module", "parents", "shape", "dtype", "params", "output_index", "num_outputs")
PARAM_FIELDS = ("address", "shape", "dtype", "is_buffer", "tied")
MODULE_FIELDS = ("address", "class_name", "children")
TABLES = (("ops", OP_FIELDS), ("params", PARAM_FIELDS), ("modules", MODULE_FIELDS))


def claim_table(trace: Trace) -> dict[str, list[list[Any]]]:
    """The trace's claims as JSON-shaped rows: one per op, parameter/buffer and module."""
    ops = []
    for op in trace.ops:
        out = op.out
        ops.append([
            op.label, op.kind, op.func, op.module_address,
            [[e.source, e.position] for e in op.parents],
            list(out.shape) if out is not None else None, out.dtype if out is not None else None,
            list(op.params), op.output_index, op.num_outputs,
        ])
    params = [[r.address, list(r.shape), r.dtype, r.is_buffer, list(r.tied)] for r in trace.params.values()]
    modules = [[m.address, m.class_name, list(m.children)] for m in trace.modules.values()]
    return {"ops": ops, "params": params, "modules": modules}


def table_digests(table: dict[str, Sequence]) -> dict[str, str]:
    """SHA-256 of each table's canonical JSON."""
    return {name: _sha(table[name]) for name, _ in TABLES}


def join(claimed: dict[str, Sequence], observed: dict[str, Sequence]) -> dict[str, Any] | None:
    """None when every claim holds; else the first structural contradiction, named."""
    for name, fields in TABLES:
        a, b = _norm(claimed[name]), _norm(observed[name])
        if len(a) != len(b):
            position = _first_difference(a, b)
            return _contradiction(name, fields, a, b, position, reason="record counts differ")
        position = _first_difference(a, b)
        if position is not None:
            return _contradiction(name, fields, a, b, position, reason="row differs")
    return None


def _first_difference(a: Sequence, b: Sequence) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def _contradiction(name: str, fields: tuple, a: Sequence, b: Sequence, position: int | None, reason: str) -> dict:
    record: dict[str, Any] = {"table": name, "reason": reason, "claimed_count": len(a), "observed_count": len(b),
                              "position": position}
    if position is None:
        return record
    row_a = a[position] if position < len(a) else None
    row_b = b[position] if position < len(b) else None
    record["claimed_row"] = row_a
    record["observed_row"] = row_b
    if row_a is not None and row_b is not None:
        # Name the most telling field: labels follow from kinds, so they are named last.
        order = sorted(range(len(fields)), key=lambda i: fields[i] == "label")
        for i in order:
            if row_a[i] != row_b[i]:
                record.update(field=fields[i], claimed=row_a[i], observed=row_b[i])
                break
    return record


def _norm(row: Any) -> Any:
    """Tables compare as JSON would see them (tuples and lists alike)."""
    return json.loads(json.dumps(row))


def _sha(rows: Any) -> str:
    return canonical_digest(rows)
