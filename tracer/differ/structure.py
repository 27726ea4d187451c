"""Structural differences: op fields of matched pairs, modules and parameters by address."""
from __future__ import annotations

from ..ir import ModuleScope, Op, ParamRecord, Trace
from .records import FieldChange, ModuleEntry, OpChange, OpRef, RecordChange


def scope_of(op: Op) -> tuple[str, ...]:
    """The module addresses enclosing `op`, outermost first."""
    return tuple(address for address, _ in op.module_stack)


def op_ref(op: Op) -> OpRef:
    """The record of an op present on one side only."""
    return OpRef(label=op.label, index=op.index, func=op.func, module=op.module, module_call=op.module_call,
                 scope=scope_of(op), shape=tuple(op.out.shape) if op.out else None,
                 dtype=op.out.dtype if op.out else None, params=tuple(op.params), io_path=op.io_path)


def op_change(x: Op, y: Op) -> OpChange | None:
    """How matched ops `x` (side a) and `y` (side b) differ in function, shape, dtype and parameters read."""
    changes = []
    if x.func != y.func:
        changes.append(FieldChange("function", x.func, y.func))
    sx, sy = (x.out.shape if x.out else None), (y.out.shape if y.out else None)
    if sx != sy:
        changes.append(FieldChange("shape", _shape(sx), _shape(sy)))
    dx, dy = (x.out.dtype if x.out else None), (y.out.dtype if y.out else None)
    if dx != dy:
        changes.append(FieldChange("dtype", str(dx), str(dy)))
    if tuple(x.params) != tuple(y.params):
        changes.append(FieldChange("params", ", ".join(x.params), ", ".join(y.params)))
    if not changes:
        return None
    return OpChange(label_a=x.label, label_b=y.label, module=x.module, scope=scope_of(x), changes=tuple(changes))


def _shape(shape) -> str:
    return "none" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def param_changes(a: Trace, b: Trace) -> tuple[tuple[str, ...], tuple[str, ...], tuple[RecordChange, ...]]:
    """Parameters and buffers added, removed and changed (shape, dtype, count, kind) by address."""
    added = tuple(p for p in b.params if p not in a.params)
    removed = tuple(p for p in a.params if p not in b.params)
    changed = []
    for address, x in a.params.items():
        y = b.params.get(address)
        if y is not None:
            fields = _param_fields(x, y)
            if fields:
                changed.append(RecordChange(address, fields))
    return added, removed, tuple(changed)


def _param_fields(x: ParamRecord, y: ParamRecord) -> tuple[FieldChange, ...]:
    out = []
    if x.shape != y.shape:
        out.append(FieldChange("shape", _shape(x.shape), _shape(y.shape)))
        out.append(FieldChange("count", str(x.numel), str(y.numel)))
    if x.dtype != y.dtype:
        out.append(FieldChange("dtype", x.dtype, y.dtype))
    if x.is_buffer != y.is_buffer:
        out.append(FieldChange("kind", _kind(x), _kind(y)))
    return tuple(out)


def _kind(rec: ParamRecord) -> str:
    return "buffer" if rec.is_buffer else "parameter"


def module_changes(a: Trace, b: Trace) -> tuple[tuple[str, ...], tuple[str, ...], tuple[RecordChange, ...]]:
    """Modules added, removed and changed (class, number of calls) by address."""
    added = tuple(m for m in b.modules if m not in a.modules)
    removed = tuple(m for m in a.modules if m not in b.modules)
    changed = []
    for address, x in a.modules.items():
        y = b.modules.get(address)
        if y is None:
            continue
        fields = []
        if x.class_name != y.class_name:
            fields.append(FieldChange("class", x.class_name, y.class_name))
        if len(x.calls) != len(y.calls):
            fields.append(FieldChange("calls", str(len(x.calls)), str(len(y.calls))))
        if fields:
            changed.append(RecordChange(address, tuple(fields)))
    return added, removed, tuple(changed)


def merged_tree(a: Trace, b: Trace) -> dict[str, ModuleEntry]:
    """Both module trees as one: each module once, its children from both sides in order, with a status."""
    entries: dict[str, ModuleEntry] = {}
    for address in (*a.modules, *(m for m in b.modules if m not in a.modules)):
        x, y = a.modules.get(address), b.modules.get(address)
        status = "matched" if x is not None and y is not None else ("removed" if y is None else "added")
        children = _merge_order(x.children if x is not None else (), y.children if y is not None else ())
        entries[address] = ModuleEntry(address=address, class_name=_class(x, y), children=children, status=status,
                                       outputs_a=_outputs(x))
    return entries


def _class(x: ModuleScope | None, y: ModuleScope | None) -> str:
    if x is not None and y is not None and x.class_name != y.class_name:
        return f"{x.class_name} -> {y.class_name}"
    return (x or y).class_name  # type: ignore[union-attr]


def _outputs(scope: ModuleScope | None) -> tuple[str, ...]:
    if scope is None:
        return ()
    return tuple(label for call in scope.calls for label in call.outputs)


def _merge_order(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    """`first` with the items only `second` has inserted after their predecessor in `second`."""
    merged = list(first)
    where = {name: i for i, name in enumerate(merged)}
    previous = -1
    for name in second:
        if name in where:
            previous = merged.index(name)
            continue
        merged.insert(previous + 1, name)
        previous += 1
        where = {n: i for i, n in enumerate(merged)}
    return tuple(merged)
