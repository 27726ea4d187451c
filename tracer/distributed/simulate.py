"""Weights-free sharded structure on a simulated mesh: a meta model, tensor parallel on torch's fake backend.

One process stands for rank 0 of `tp x fsdp` ranks. The model is built on meta from its config,
sharded with the config's own tensor-parallel plan (`base_model_tp_plan`: colwise / rowwise) over
the mesh's "tp" dimension, and captured structure-only: the sharded graph with every DTensor's
layout and the tensor-parallel collectives as ops (`estimated=True`: the fake backend moves
nothing). FSDP cannot run on meta parameters, so its sharding is computed, not captured: per-rank
parameter bytes and one all-gather estimate per FSDP unit (each decoder layer, then the root).
Everything is a HYPOTHESIS until a real sharded capture of the same twin corroborates it.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from torch import nn

from ..errors import SimulatedMeshError
from ..ir import Trace
from .collectives import wire_bytes

_STYLES = ("colwise", "rowwise")
_ESTIMATE_NOTE = ("simulated on torch's fake backend: collectives ran on meta tensors and moved nothing; FSDP "
                  "sharding is computed from the parameter shapes (dim 0 padded to a multiple of fsdp), not captured")


def simulate(config_or_model: Any, *, tp: int = 1, fsdp: int = 1, world_size: int | None = None,
             input_shape: Sequence[int] = (1, 8)) -> Trace:
    """Structure-only trace of rank 0 of a `tp x fsdp` mesh (fake backend, one process, no weights)."""
    world = _check_mesh(tp, fsdp, world_size)
    import torch.distributed as dist

    if dist.is_initialized():
        raise SimulatedMeshError(f"a process group ({dist.get_backend()}) is already initialized in this process",
                                 site="tracer.distributed.simulate",
                                 remedy="Simulate in a process without a process group; on a real mesh use tracer.trace.")
    model, source = _meta_model(config_or_model)
    _check_heads(model, tp)
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

    from .admission import simulated_mesh
    from ..bridges.transformers import trace_ids

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (fsdp, tp), mesh_dim_names=("fsdp", "tp"))
        if tp > 1:
            _apply_tp_plan(model, mesh["tp"])
        with simulated_mesh():
            result = trace_ids(model, input_shape)
    finally:
        dist.destroy_process_group()
    found = dict(result.provenance.distributed or {})
    found.update(simulated=True, tp=tp, fsdp=fsdp, world_size=world, note=_ESTIMATE_NOTE,
                 **fsdp_estimates(result, model, fsdp))
    return result.with_provenance(distributed=found, **({"config_source": source} if source else {}))


def _check_mesh(tp: int, fsdp: int, world_size: int | None) -> int:
    for name, value in (("tp", tp), ("fsdp", fsdp)):
        if not isinstance(value, int) or value < 1:
            raise SimulatedMeshError(f"{name} must be a positive integer, got {value!r}",
                                     site=f"tracer.distributed.simulate({name}=...)")
    world = tp * fsdp if world_size is None else world_size
    if world != tp * fsdp:
        raise SimulatedMeshError(f"world_size {world} is not tp x fsdp = {tp * fsdp}",
                                 site="tracer.distributed.simulate(world_size=...)")
    return world


def _meta_model(config_or_model: Any) -> tuple[nn.Module, str | None]:
    from ..bridges.transformers import build_meta_model, load_config

    if isinstance(config_or_model, nn.Module):
        real = [n for n, p in config_or_model.named_parameters() if not p.is_meta]
        if real:
            raise SimulatedMeshError(f"the model holds real parameters ({real[0]}, ...); simulation needs a meta model",
                                     site=real[0], remedy="Build it from its config on the meta device.")
        return config_or_model, None
    config = config_or_model if hasattr(config_or_model, "to_dict") else load_config(config_or_model)
    source = None if hasattr(config_or_model, "to_dict") else str(config_or_model)
    return build_meta_model(config), source


def _check_heads(model: nn.Module, tp: int) -> None:
    config = getattr(model, "config", None)
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, name, None)
        if tp > 1 and isinstance(heads, int) and heads % tp:
            raise SimulatedMeshError(f"{name}={heads} is not divisible by tp={tp}: column-wise attention "
                                     "projections would split a head", site=f"config.{name}")


def _apply_tp_plan(model: nn.Module, tp_mesh: Any) -> None:
    """Shard `model` with its config's `base_model_tp_plan` (column-wise / row-wise entries)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = dict(getattr(getattr(model, "config", None), "base_model_tp_plan", None) or {})
    if not plan:
        raise SimulatedMeshError(f"{type(model).__name__}'s config has no base_model_tp_plan to shard it with",
                                 site="config.base_model_tp_plan", remedy="Simulate it with tp=1 (FSDP only).")
    unknown = sorted({style for style in plan.values() if style not in _STYLES})
    if unknown:
        raise SimulatedMeshError(f"tensor-parallel styles {unknown} are not simulated (only {list(_STYLES)})",
                                 site="config.base_model_tp_plan")
    prefix = getattr(model, "base_model_prefix", "")
    if not prefix or not isinstance(getattr(model, prefix, None), nn.Module):
        prefix = ""
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(model, tp_mesh, {(f"{prefix}.{k}" if prefix else k): styles[v]() for k, v in plan.items()})


def fsdp_estimates(trace: Trace, model: nn.Module, fsdp: int) -> dict[str, Any]:
    """Per-rank parameter bytes after tensor and FSDP sharding, and one all-gather estimate per FSDP unit."""
    itemsize = {name: p.element_size() for name, p in model.named_parameters(remove_duplicate=False)}
    per_param = {}
    for addr, rec in trace.params.items():
        if rec.is_buffer:
            continue
        shape = rec.layout.local_shape if rec.layout is not None else rec.shape
        rows = math.ceil(shape[0] / fsdp) if shape else 1
        per_param[addr] = rows * math.prod(shape[1:]) * itemsize.get(addr, 4)
    units = _fsdp_units(model)
    payloads = dict.fromkeys(units, 0)
    for addr, nbytes in per_param.items():
        payloads[_unit_of(addr, payloads)] += nbytes
    unshard = [{"unit": unit, "name": "all_gather", "group_size": fsdp, "payload_bytes": payload,
                "wire_bytes": wire_bytes("all_gather", payload, fsdp), "estimated": True}
               for unit, payload in payloads.items()]
    return {"parameter_bytes_per_rank": sum(per_param.values()),
            "fsdp_unshard": unshard if fsdp > 1 else [],
            "fsdp_unshard_wire_bytes": sum(u["wire_bytes"] for u in unshard) if fsdp > 1 else 0}


def _fsdp_units(model: nn.Module) -> list[str]:
    """Each decoder layer is an FSDP unit (the usual wrapping), then the root ("") holding the rest."""
    layers = [name for name, m in model.named_modules() if type(m).__name__.endswith(("DecoderLayer", "Block"))]
    return layers + [""]


def _unit_of(address: str, units: dict[str, int]) -> str:
    """The innermost FSDP unit whose address prefixes `address` (the root "" when none)."""
    prefix = address
    while "." in prefix:
        prefix = prefix.rpartition(".")[0]
        if prefix in units:
            return prefix
    return ""
