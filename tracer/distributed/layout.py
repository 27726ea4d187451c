"""A DTensor's layout as IR data: mesh, placements, global and local shapes (read, never changed)."""
from __future__ import annotations

from typing import Any

from ..ir import ShardLayout, TensorMeta


def placement_text(p: Any) -> str:
    """`Shard(0)`, `Replicate()` or `Partial(sum)`: one placement as the explorer shows it."""
    name = type(p).__name__
    if name.endswith("Shard"):  # Shard, _StridedShard
        return f"Shard({p.dim})"
    if name == "Replicate":
        return "Replicate()"
    if name.endswith("Partial"):  # Partial, _NormPartial, _MaskPartial (a vocab-parallel embedding's)
        return f"Partial({getattr(p, 'reduce_op', 'sum')})"
    return repr(p)


def mesh_description(mesh: Any) -> dict[str, Any]:
    """A device mesh as plain data: shape, dimension names, ranks (row-major) and device type."""
    return {"shape": list(mesh.shape), "dims": list(mesh.mesh_dim_names or ()),
            "ranks": [int(r) for r in mesh.mesh.flatten().tolist()], "device_type": mesh.device_type}


def shard_layout(t: Any) -> ShardLayout:
    """The layout of DTensor `t` on its mesh (this rank's local shape beside the global one)."""
    mesh = t.device_mesh
    return ShardLayout(
        global_shape=tuple(int(d) for d in t.shape),
        local_shape=tuple(int(d) for d in t._local_tensor.shape),
        placements=tuple(placement_text(p) for p in t.placements),
        mesh_shape=tuple(int(d) for d in mesh.shape),
        mesh_dims=tuple(mesh.mesh_dim_names or ()),
        mesh_ranks=tuple(int(r) for r in mesh.mesh.flatten().tolist()),
    )


def local_meta(t: Any) -> TensorMeta:
    """TensorMeta of DTensor `t`'s local shard on this rank."""
    local = t._local_tensor
    return TensorMeta(shape=tuple(local.shape), dtype=str(local.dtype).replace("torch.", ""),
                      device=str(local.device), requires_grad=bool(t.requires_grad))
