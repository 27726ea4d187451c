"""Model Explorer node attributes of a sharded trace's op: its rank, its tensor's placement, its collective."""
from __future__ import annotations

from tracer.ir import Op


def distributed_attrs(op: Op) -> list[dict[str, str]]:
    """`rank`, `placement` (with global and local shape, mesh) and `collective` key-value attributes; [] for a plain op."""
    attrs = []
    if op.rank is not None:
        attrs.append({"key": "rank", "value": str(op.rank)})
    lay = op.layout
    if lay is not None:
        attrs += [{"key": "placement", "value": placement_badge(op)},
                  {"key": "global_shape", "value": str(list(lay.global_shape))},
                  {"key": "local_shape", "value": str(list(lay.local_shape))},
                  {"key": "mesh", "value": mesh_text(op)}]
    c = op.collective
    if c is not None:
        attrs += [{"key": "collective", "value": f"{c.name} ({c.api}) over ranks {list(c.group)}"},
                  {"key": "payload_bytes", "value": str(c.payload_bytes)},
                  {"key": "wire_bytes", "value": f"{c.wire_bytes}{' (estimate)' if c.estimated else ''}"}]
        if c.reduce_op:
            attrs.append({"key": "reduce_op", "value": c.reduce_op})
    return attrs


def placement_badge(op: Op) -> str:
    """`Shard(1)`, `Replicate()`, `Partial(sum)`; on a 2-D mesh each with its mesh dimension: `fsdp:Replicate(), tp:Shard(0)`."""
    lay = op.layout
    if lay is None:
        return ""
    if len(lay.placements) == 1:
        return lay.placements[0]
    dims = lay.mesh_dims or tuple(str(i) for i in range(len(lay.placements)))
    return ", ".join(f"{d}:{p}" for d, p in zip(dims, lay.placements))


def mesh_text(op: Op) -> str:
    """The mesh an op's tensor lives on: `tp[2] ranks 0-1` or `fsdp x tp [8, 8]`."""
    lay = op.layout
    if lay is None:
        return ""
    dims = " x ".join(lay.mesh_dims) if lay.mesh_dims else "mesh"
    ranks = lay.mesh_ranks
    span = f" ranks {ranks[0]}-{ranks[-1]}" if ranks else ""
    return f"{dims} {list(lay.mesh_shape)}{span}"
