"""Claim tables and their positional join: the structural facts a trace asserts, row by row.

A claim row is device-free (meta and real twins must agree on everything but values and device).
The join compares record counts, then rows in order, naming the first differing position and
field. Table digests (`table_digests`) seal a saved envelope's claims; the join needs none.

`folded_join` is the weaker comparison a discharge falls back on: constant-only subgraphs (ops
fed by no input and no parameter, e.g. coordinates from `arange`) are compared by the values
they feed, so a tensor one side computed and the other read from a cache filled by an earlier
forward (an `lru_cache`, a module's attribute) is not a contradiction; what it folded is disclosed.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ..digest import canonical_digest
from ..ir import INPUT_KIND, OUTPUT_KIND, Trace

OP_FIELDS = ("label", "kind", "func", "module", "parents", "shape", "dtype", "params", "output_index", "num_outputs")
PARAM_FIELDS = ("address", "shape", "dtype", "is_buffer", "tied")
MODULE_FIELDS = ("address", "class_name", "children")
TABLES = (("ops", OP_FIELDS), ("params", PARAM_FIELDS), ("modules", MODULE_FIELDS))
FOLDED_OP_FIELDS = OP_FIELDS[1:]  # labels follow kind counts, which folding changes
_RANDOM_KINDS = ("rand", "normal", "bernoulli", "multinomial", "uniform", "exponential", "poisson", "dropout")


def claim_table(trace: Trace) -> dict[str, tuple[tuple[Any, ...], ...]]:
    """The trace's claims as read-only JSON-shaped rows (tuples): one per op, parameter/buffer and module.

    Built frozen, so sealing stores it as it is; the trace's own tuples (shapes, params, children) are
    shared, anything else of theirs becomes a tuple.
    """
    ops = []
    append = ops.append
    for op in trace.ops:
        out, params, parents = op.out, op.params, op.parents
        if out is None:
            shape = dtype = None
        else:
            shape, dtype = out.shape, out.dtype
            if type(shape) is not tuple:
                shape = tuple(shape)
        if len(parents) == 1:  # most ops: no comprehension to run
            edge = parents[0]
            edges: tuple = ((edge.source, edge.position),)
        else:
            edges = tuple([(e.source, e.position) for e in parents])
        append((op.label, op.kind, op.func, op.module_address, edges, shape, dtype,
                params if type(params) is tuple else tuple(params), op.output_index, op.num_outputs))
    params = tuple([(r.address, _tuple(r.shape), r.dtype, r.is_buffer, _tuple(r.tied)) for r in trace.params.values()])
    modules = tuple([(m.address, m.class_name, _tuple(m.children)) for m in trace.modules.values()])
    return {"ops": tuple(ops), "params": params, "modules": modules}


def _tuple(items: Any) -> tuple:
    return items if type(items) is tuple else tuple(items)


def table_digests(table: dict[str, Sequence]) -> dict[str, str]:
    """SHA-256 of each table's canonical JSON."""
    return {name: _sha(table[name]) for name, _ in TABLES}


def join(claimed: dict[str, Sequence], observed: dict[str, Sequence], *, plain: bool = False) -> dict[str, Any] | None:
    """None when every claim holds; else the first structural contradiction, named (`plain`: both tables
    hold rows of one shape already, as `claim_table` and a sealed envelope's claims give them: tuples)."""
    for name, fields in TABLES:
        a, b = (claimed[name], observed[name]) if plain else (_norm(claimed[name]), _norm(observed[name]))
        if len(a) != len(b):
            position = _first_difference(a, b)
            return _contradiction(name, fields, a, b, position, reason="record counts differ")
        position = _first_difference(a, b)
        if position is not None:
            return _contradiction(name, fields, a, b, position, reason="row differs")
    return None


def folded_join(claimed: dict[str, Sequence], observed: dict[str, Sequence]) -> tuple[dict[str, Any] | None, dict]:
    """`join` with constant-only op subgraphs folded into the values they feed; also returns what was folded."""
    a, folded_a = fold_constants(_norm(claimed["ops"]))
    b, folded_b = fold_constants(_norm(observed["ops"]))
    folded = {"claimed_constant_ops": folded_a, "observed_constant_ops": folded_b}
    position = _first_difference(a, b)
    if position is not None:
        reason = "record counts differ" if len(a) != len(b) else "row differs"
        return _contradiction("ops (constants folded)", FOLDED_OP_FIELDS, a, b, position, reason=reason), folded
    return join({**claimed, "ops": []}, {**observed, "ops": []}), folded


def fold_constants(rows: Sequence) -> tuple[list, int]:
    """Op rows without their constant-only ops (no input, parameter or random draw upstream), unlabelled:
    a parent is the index of a kept row, or `["constant", shape, dtype]`. Also the number of ops folded."""
    constants: dict[str, list] = {}
    index: dict[str, int] = {}
    kept: list = []
    for label, kind, func, module, parents, shape, dtype, params, out_index, n_out in rows:
        if (kind not in (INPUT_KIND, OUTPUT_KIND) and not params and not kind.startswith(_RANDOM_KINDS)
                and all(src in constants for src, _pos in parents)):
            constants[label] = ["constant", shape, dtype]
            continue
        index[label] = len(kept)
        edges = [[constants[src] if src in constants else index.get(src, src), pos] for src, pos in parents]
        kept.append([kind, func, module, edges, shape, dtype, params, out_index, n_out])
    return kept, len(constants)


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


def plain_json(value: Any) -> Any:
    """`value` as JSON would see it (tuples -> lists, read-only mappings -> dicts), in one linear pass;
    leaves (str, int, float, bool, None) are not copied."""
    t = type(value)
    if t is list or t is tuple:
        return [v if type(v) in _LEAVES else plain_json(v) for v in value]
    if t is dict or t is MappingProxyType or (t not in _LEAVES and isinstance(value, Mapping)):
        return {k: v if type(v) in _LEAVES else plain_json(v) for k, v in value.items()}
    return value


_LEAVES = frozenset({str, int, float, bool, type(None)})
_norm = plain_json  # tables compare as JSON would see them (tuples and lists alike)


def _sha(rows: Any) -> str:
    return canonical_digest(rows)
