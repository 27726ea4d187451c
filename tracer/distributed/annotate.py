"""After a distributed capture: layouts and collectives become Op fields, collective ops kind "collective"."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..ir import COLLECTIVE_KIND, Edge, Op, ParamRecord
from .layout import shard_layout


def annotate_ops(ops: tuple[Op, ...], guard: Any) -> tuple[Op, ...]:
    """`ops` with local shapes, layouts and collectives set; collectives relabelled `collective_N` (edges follow)."""
    if not guard.layouts and not guard.collectives:
        return ops
    renamed: dict[str, str] = {}
    count = 0
    out = []
    for op in ops:
        changes: dict[str, Any] = {}
        hit = guard.layouts.get(op.index)
        if hit is not None:
            changes["layout"], changes["out"] = hit
        coll = guard.collectives.get(op.index)
        if coll is not None:
            count += 1
            label = f"{COLLECTIVE_KIND}_{count}"
            renamed[op.label] = label
            changes.update(kind=COLLECTIVE_KIND, label=label, collective=coll)
        if renamed and any(e.source in renamed for e in op.parents):
            changes["parents"] = tuple(Edge(renamed.get(e.source, e.source), e.position) for e in op.parents)
        out.append(replace(op, **changes) if changes else op)
    return tuple(out)


def param_layouts(params: dict[str, ParamRecord], model: Any) -> dict[str, ParamRecord]:
    """Parameter records with the layout of each DTensor parameter or buffer (global shape kept as `shape`)."""
    from .admission import is_dtensor

    state = dict(model.named_parameters(remove_duplicate=False))
    state.update(model.named_buffers(remove_duplicate=False))
    out = {}
    for addr, rec in params.items():
        t = state.get(addr)
        out[addr] = replace(rec, layout=shard_layout(t)) if t is not None and is_dtensor(t) else rec
    return out


def local_values(values: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Saved values as plain tensors (a DTensor's local shard, a pending collective's waited result), and
    the labels of values whose storage was freed after they were made (FSDP frees unsharded parameters
    at reshard), which are left out. Meta tensors some sharding plans make for shape arithmetic hold no
    data and are left out too."""
    from .admission import is_dtensor

    out = {}
    freed = []
    for label, t in values.items():
        if is_dtensor(t):
            t = t._local_tensor
        if type(t).__name__ == "AsyncCollectiveTensor":
            t = t.trigger_wait()
            t = getattr(t, "elem", t)
        if t.is_meta:
            continue
        if t.numel() and t.untyped_storage().nbytes() < (t.storage_offset() + 1) * t.element_size():
            freed.append(label)
            continue
        out[label] = t
    return out, freed
