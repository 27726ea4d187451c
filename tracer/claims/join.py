"""Claim tables and their positional join: the structural facts a trace asserts, row by row.

A claim row is device-free (meta and real twins must agree on everything but values and device).
The join compares record counts, then rows in order, naming the first differing position and
field. Table digests (`table_digests`) seal a saved envelope's claims; the join needs none.

`folded_join` is the weaker comparison a discharge falls back on: constant-only subgraphs (ops
fed by no input and no parameter, e.g. coordinates from `arange`) are compared by the values
they feed, so a tensor one side computed and the other read from a cache filled by an earlier
forward (an `lru_cache`, a module's attribute) is not a contradiction; and ops are compared by
their ancestry rather than their position, so independent ops that ran in another order (a loop
over a set, whose order follows the process's string hashing) are not one either. What it
folded and how many ops it found reordered are disclosed.
"""
from __future__ import annotations

from collections import Counter
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

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
    return claim_rows(trace.ops, trace.params.values(), trace.modules.values())


def claim_rows(op_records: Iterable[Any], param_records: Iterable[Any],
               module_records: Iterable[Any]) -> dict[str, tuple[tuple[Any, ...], ...]]:
    """`claim_table` from a trace's parts (ops in order, param records, module scopes): what a load re-derives."""
    ops = []
    append = ops.append
    for op in op_records:
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
    params = tuple([(r.address, _tuple(r.shape), r.dtype, r.is_buffer, _tuple(r.tied)) for r in param_records])
    modules = tuple([(m.address, m.class_name, _tuple(m.children)) for m in module_records])
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
    """`join` where ops are compared by their ancestry rather than their position (`ancestries`), so
    independent ops that ran in another order on each side are not a contradiction, and, where that is
    not enough, with constant-only op subgraphs folded into the values they feed. Also returns how many
    constant ops each side folded and how many ops ran at another position."""
    claimed_ops, observed_ops = _norm(claimed["ops"]), _norm(observed["ops"])
    a, _ = fold_constants(claimed_ops, fold=False)
    b, _ = fold_constants(observed_ops, fold=False)
    reordered = _reordered(a, b)
    folded = {"claimed_constant_ops": 0, "observed_constant_ops": 0, "reordered_ops": reordered or 0}
    if reordered is None:
        a, folded["claimed_constant_ops"] = fold_constants(claimed_ops)
        b, folded["observed_constant_ops"] = fold_constants(observed_ops)
        position = _first_difference(a, b)
        if position is not None:
            reordered = _reordered(a, b)
            if reordered is None:
                reason = "record counts differ" if len(a) != len(b) else "row differs"
                return _contradiction("ops (constants folded)", FOLDED_OP_FIELDS, a, b, position, reason=reason), folded
            folded["reordered_ops"] = reordered
    return join({**claimed, "ops": []}, {**observed, "ops": []}), folded


def fold_constants(rows: Sequence, fold: bool = True) -> tuple[list, int]:
    """Op rows without their constant-only ops (no input, parameter or random draw upstream), unlabelled:
    a parent is the index of a kept row, or `["constant", shape, dtype]`. Also the number of ops folded.
    With `fold=False` every row is kept, unlabelled the same way."""
    constants: dict[str, list] = {}
    index: dict[str, int] = {}
    kept: list = []
    for label, kind, func, module, parents, shape, dtype, params, out_index, n_out in rows:
        if (fold and kind not in (INPUT_KIND, OUTPUT_KIND) and not params and not kind.startswith(_RANDOM_KINDS)
                and all(src in constants for src, _pos in parents)):
            constants[label] = ["constant", shape, dtype]
            continue
        index[label] = len(kept)
        edges = [[constants[src] if src in constants else index.get(src, src), pos] for src, pos in parents]
        kept.append([kind, func, module, edges, shape, dtype, params, out_index, n_out])
    return kept, len(constants)


def _reordered(a: Sequence, b: Sequence) -> int | None:
    """How many ops of two unlabelled op tables sit at another position, when both hold the same multiset
    of op ancestries and some op moved; None otherwise (also when the tables differ only where ancestries
    do not look, e.g. in which call of a module an op ran: that is not a reordering)."""
    if len(a) != len(b):
        return None
    classes: dict = {}
    in_a, in_b = ancestries(a, classes), ancestries(b, classes)
    if Counter(in_a) != Counter(in_b):
        return None
    return sum(x != y for x, y in zip(in_a, in_b)) or None


def ancestries(rows: Sequence, classes: dict) -> list[int]:
    """Each op row's ancestry class (rows as `fold_constants` gives them): two ops share a class exactly
    when their kind, call, module (not which call of it), shape, dtype, parameters and output position
    are equal and, recursively, so are their parents at the same argument positions. `classes` is shared
    by the tables compared. Equal multisets of classes mean the same graph up to the order in which
    independent ops ran (a model looping over a set of strings: the order follows the process's hashing).
    """
    out: list[int] = []
    for kind, func, module, edges, shape, dtype, params, out_index, n_out in rows:
        parents = tuple([(out[p] if type(p) is int and p < len(out) else _frozen(p), pos) for p, pos in edges])
        if ":" in module:  # `address:call`: which call of a module ran first is an order, not a structure
            address, _, call = module.rpartition(":")
            module = address if call.isdigit() else module
        key = (kind, func, module, parents, _frozen(shape), dtype, _frozen(params), out_index, n_out)
        out.append(classes.setdefault(key, len(classes)))
    return out


def _frozen(value: Any) -> Any:
    """Lists (as JSON reads them back) as tuples, all the way down: a hashable key."""
    return tuple([_frozen(v) for v in value]) if type(value) in (list, tuple) else value


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
