"""Ops as columns (trace.json schema 3): one JSON list per Op field, repeated values as a table plus indices.

An op-dense trace repeats a few tensor shapes, source lines, module stacks and call templates over
100,000s of ops; written once each and referenced by index, such a structure is about 7x smaller and
decodes into a few shared objects instead of a dozen per op. The columns are made from the Op
dataclass's own fields and type annotations, so a new Op field is persisted and type-checked with no
change here: a field with a default that every op holds is left out and read back as that default.
`index` is implicit (the op's position).
"""
from __future__ import annotations

import dataclasses
import typing
from itertools import repeat
from operator import attrgetter
from typing import Any, Callable, Generic, Iterable, NamedTuple, TypeVar

import msgspec

from ..errors import TraceSaveFailedError, TraceStructureInvalidError
from ..ir import Op, new_op

T = TypeVar("T")

# Fields written as a table of distinct values and an index per op (the rest are plain lists).
INTERNED = frozenset({"kind", "func", "out", "module", "module_stack", "params", "buffer_writes", "source",
                      "io_path", "attrs"})
_BY_TEXT = frozenset({"attrs"})  # unhashable (dicts): distinct by their JSON text
_BY_VALUE = frozenset({"kind", "func", "module", "io_path", "params", "buffer_writes"})  # str or tuple: cheap to hash
_FIELDS = tuple(f for f in dataclasses.fields(Op) if f.name != "index")
_FIELD = {f.name: f for f in _FIELDS}
_HINTS = typing.get_type_hints(Op)


class Interned(msgspec.Struct, Generic[T], forbid_unknown_fields=True):
    """A column as its distinct values and, per op, the position of its value in `table`."""

    table: list[T]
    index: list[int]


def _column_type(f: dataclasses.Field) -> tuple[str, Any, Any]:
    kind = Interned[_HINTS[f.name]] if f.name in INTERNED else list[_HINTS[f.name]]  # type: ignore[index]
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    return (f.name, kind) if required else (f.name, kind | None, None)


def _required_first(specs: list[tuple]) -> list[tuple]:
    return [s for s in specs if len(s) == 2] + [s for s in specs if len(s) == 3]


OpColumns = msgspec.defstruct("OpColumns", [("count", int), *_required_first([_column_type(f) for f in _FIELDS])],
                              forbid_unknown_fields=True, module=__name__)


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]


# -- write ------------------------------------------------------------------------------
def to_columns(ops: tuple[Op, ...], plain: Callable[[Any], bytes]) -> dict[str, Any]:
    """The columns of `ops` as a dict msgspec encodes (`plain`: a value as the JSON text it is written as)."""
    n = len(ops)
    if list(map(attrgetter("index"), ops)) != list(range(n)):
        raise TraceSaveFailedError("the trace's op indices are not their positions; a file stores ops in order",
                                   site="trace.ops")
    doc: dict[str, Any] = {"count": n}
    for f in _FIELDS:
        column = list(map(attrgetter(f.name), ops))
        if f.name in INTERNED:
            doc[f.name] = (_interned_by_text(column, plain) if f.name in _BY_TEXT
                           else _interned(column, plain, f.name in _BY_VALUE))
        elif f.default is dataclasses.MISSING or column.count(f.default) != n:
            doc[f.name] = column
    return doc


def _interned(column: list, plain: Callable[[Any], bytes], by_value: bool) -> dict[str, list]:
    """Distinct values of `column`: strings and tuples hashed directly; records (whose hash and equality run
    in Python) by object first, as a capture shares its shapes, source lines and stacks, then by value."""
    objects = column if by_value else dict(zip(map(id, column), column))  # the ops keep every value alive
    try:
        position = dict.fromkeys(column if by_value else objects.values())
    except TypeError:  # an unhashable value where the IR has a hashable one: distinct by its JSON text
        return _interned_by_text(column, plain)
    for i, value in enumerate(position):
        position[value] = i
    if by_value:
        return {"table": list(position), "index": list(map(position.__getitem__, column))}
    at_id = dict(zip(objects, map(position.__getitem__, objects.values())))
    return {"table": list(position), "index": list(map(at_id.__getitem__, map(id, column)))}


def _interned_by_text(column: list, plain: Callable[[Any], bytes]) -> dict[str, list]:
    objects = dict(zip(map(id, column), column))
    table: dict[bytes, int] = {}
    at_id = dict(zip(objects, (table.setdefault(text, len(table)) for text in map(plain, objects.values()))))
    return {"table": list(map(msgspec.Raw, table)), "index": list(map(at_id.__getitem__, map(id, column)))}


# -- read -------------------------------------------------------------------------------
class Scope(NamedTuple):
    """One distinct (module, module_call, module_stack) of a trace's ops."""

    module: str
    module_call: int
    module_stack: tuple


def to_ops(columns: Any, site: str) -> tuple[Op, ...]:
    """The Op records of decoded columns, refusing columns of the wrong length or indices out of range."""
    n = columns.count
    if not 0 <= n <= (1 << 53):
        raise _bad(site, "count", f"is {n}")
    args: list[Iterable] = [range(n)]
    for f in _FIELDS:
        value = getattr(columns, f.name)
        if value is None:
            args.append(repeat(_default(f), n))
        elif f.name in INTERNED:
            table, index = value.table, value.index
            if len(index) != n:
                raise _bad(site, f.name, f"has {len(index)} entries for {n} ops")
            if index and (min(index) < 0 or max(index) >= len(table)):
                raise _bad(site, f.name, f"refers past its table of {len(table)}")
            args.append(map(table.__getitem__, index))
        else:
            if len(value) != n:
                raise _bad(site, f.name, f"has {len(value)} entries for {n} ops")
            args.append(value)
    return tuple(map(new_op, *args))


def distinct(columns: Any, name: str) -> list:
    """Every value an interned column's table holds (each op's value is one of them)."""
    value = getattr(columns, name)
    return [_default(_FIELD[name])] if value is None else value.table


def distinct_scopes(columns: Any) -> list[Scope]:
    """The distinct (module, module_call, module_stack) triples the ops run in."""
    n = columns.count

    def at(name: str) -> Iterable[int]:  # each op's position in the table (a left-out column: its default, at 0)
        value = getattr(columns, name)
        return repeat(0, n) if value is None else value.index

    modules, stacks = distinct(columns, "module"), distinct(columns, "module_stack")
    calls = repeat(_default(_FIELD["module_call"]), n) if columns.module_call is None else columns.module_call
    return [Scope(modules[m], c, stacks[s]) for m, c, s in set(zip(at("module"), calls, at("module_stack")))]


def _bad(site: str, column: str, what: str) -> TraceStructureInvalidError:
    return TraceStructureInvalidError(f"{site}: ops.{column} {what}", site=f"{site}: ops.{column}")
