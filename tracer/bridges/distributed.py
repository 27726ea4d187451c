"""Distributed state: DTensor detection shared by capture admission and the doctor.

A model whose parameters are DTensors (sharded by `parallelize_module`, or loaded by
transformers with a `tp_plan`) computes each rank's part of the forward plus collectives;
a per-rank trace would record neither the whole model nor the communication faithfully, so
capture refuses at entry, before anything is installed. Detection never imports
torch.distributed: a DTensor is recognised by its class.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

import torch
from torch import nn

from ..errors import DistributedCaptureUnsupportedError

_MAX_NAMED = 8


def is_dtensor(t: Any) -> bool:
    """True when `t` is a `torch.distributed.tensor.DTensor` (by class, no import)."""
    cls = type(t)
    return cls.__name__ == "DTensor" and cls.__module__.startswith("torch.distributed")


def _named_state(model: nn.Module, modules: list | None) -> Iterator[tuple[str, torch.Tensor]]:
    from ..capture.walk import named_state

    yield from named_state(model, "_parameters", modules=modules)
    yield from named_state(model, "_buffers", modules=modules)


def distributed_findings(model: nn.Module, args: tuple = (), kwargs: Mapping[str, Any] | None = None,
                         *, modules: list | None = None) -> dict[str, Any] | None:
    """What makes `model` (and its inputs) distributed: kinds, tensors, placements; None if nothing."""
    from ..capture.walk import iter_tensors

    dtensors = [(name, t) for name, t in _named_state(model, modules) if is_dtensor(t)]
    dtensors += [(path, t) for path, t in iter_tensors([list(args), dict(kwargs or {})], "inputs") if is_dtensor(t)]
    tp_plan = _tp_plan(model)
    sharded = [(name, t) for name, t in dtensors if any(type(p).__name__ == "Shard" for p in t.placements)]
    kinds = []
    if dtensors:
        kinds.append("dtensor")
    if sharded or tp_plan:
        kinds.append("tensor_parallel")
    if not kinds:
        return None
    mesh = dtensors[0][1].device_mesh if dtensors else getattr(model, "_device_mesh", None)
    return {
        "kinds": kinds,
        "dtensors": [name for name, _ in dtensors[:_MAX_NAMED]],
        "num_dtensors": len(dtensors),
        "placements": {name: [repr(p) for p in t.placements] for name, t in sharded[:_MAX_NAMED]},
        "tp_plan": bool(tp_plan),
        "mesh": _describe_mesh(mesh),
    }


def refuse_distributed(model: nn.Module, args: tuple, kwargs: Mapping[str, Any], *, modules: list | None = None) -> None:
    """Raise `DistributedCaptureUnsupportedError` when the model or inputs are distributed."""
    found = distributed_findings(model, args, kwargs, modules=modules)
    if found is None:
        return
    first = (found["dtensors"] or ["model._tp_plan"])[0]
    raise DistributedCaptureUnsupportedError(
        f"{type(model).__name__} is distributed ({', '.join(found['kinds'])}): {found['num_dtensors']} DTensor "
        f"parameters/buffers/inputs on mesh {found['mesh']}; a per-rank capture would record one shard of the "
        f"computation and none of its collectives",
        site=first, tensor=first, state="DTensor" if found["dtensors"] else "tensor_parallel", **found)


def _tp_plan(model: nn.Module) -> bool:
    """True when transformers sharded this model with a tensor-parallel plan (tp size > 1)."""
    size = getattr(model, "_tp_size", None)
    return bool(getattr(model, "_tp_plan", None)) and isinstance(size, int) and size > 1


def _describe_mesh(mesh: Any) -> str | None:
    if mesh is None:
        return None
    try:
        return f"{mesh.device_type}:{list(mesh.mesh.flatten().tolist())}"
    except Exception:
        return repr(mesh)
