"""Distributed admission: DTensor detection shared by capture admission and the doctor (the entry refusal of untested setups).

A model whose parameters are DTensors (sharded by `parallelize_module` or `fully_shard`) computes
each rank's part of the forward plus collectives. Inside an initialized process group capture is
admitted with the `tracer.distributed` guard, which records layouts and collectives; the setups no
test covers are refused at entry, before anything is installed. Detection never imports
torch.distributed: a DTensor is recognised by its class.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from ..errors import DistributedCaptureUnsupportedError

_MAX_NAMED = 8
_simulation = threading.local()  # set by tracer.distributed.simulate on this thread while it captures


@contextlib.contextmanager
def simulated_mesh() -> Iterator[None]:
    """Within the block, this thread's structure-only captures admit DTensors (a simulated, fake-backend mesh)."""
    previous = getattr(_simulation, "active", False)
    _simulation.active = True
    try:
        yield
    finally:
        _simulation.active = previous


def simulated_mesh_active() -> bool:
    """True inside `simulated_mesh()` on this thread."""
    return getattr(_simulation, "active", False)


_PLAIN_TENSORS = (torch.Tensor, nn.Parameter)  # no DTensor: skipped without a call per tensor


def is_dtensor(t: Any) -> bool:
    """True when `t` is a `torch.distributed.tensor.DTensor` (by class, no import)."""
    cls = type(t)
    return cls.__name__ == "DTensor" and cls.__module__.startswith("torch.distributed")


def distributed_findings(model: nn.Module, args: tuple = (), kwargs: Mapping[str, Any] | None = None,
                         *, modules: list | None = None, state: tuple[list, list] | None = None
                         ) -> dict[str, Any] | None:
    """What makes `model` (and its inputs) distributed: kinds, tensors, placements; None if nothing.

    `state` is `capture.walk.params_and_buffers(model)`, already made (else made here)."""
    from ..capture.walk import iter_tensors, params_and_buffers

    params, buffers = params_and_buffers(model, modules=modules) if state is None else state
    dtensors = [(name, t) for name, t in (*params, *buffers) if type(t) not in _PLAIN_TENSORS and is_dtensor(t)]
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


def admit_distributed(model: nn.Module, args: tuple, kwargs: Mapping[str, Any], *, modules: list | None = None,
                      state: tuple[list, list] | None = None, structure_only: bool = False, backward: bool = False) -> Any:
    """A `tracer.distributed` guard when the capture runs in a process group or on DTensors, else None.

    What is not tested is refused with `DistributedCaptureUnsupportedError`, before anything is
    installed: DTensors without an initialized process group, pipeline-parallel stages, a backward and a structure-only capture of a sharded model.
    """
    found = distributed_findings(model, args, kwargs, modules=modules, state=state)
    group = _process_group_initialized()
    if found is None and not group:
        return None
    first = ((found or {}).get("dtensors") or ["model"])[0]
    _refuse_untested(model, found, group, first, modules, structure_only=structure_only, backward=backward)
    from ..distributed.guard import DistributedGuard

    return DistributedGuard()


def _refuse_untested(model: nn.Module, found: dict | None, group: bool, first: str, modules: list | None, *,
                     structure_only: bool, backward: bool) -> None:
    """Raise for the distributed setups no test covers (see docs/distributed.md)."""
    name = type(model).__name__
    findings = found or {}
    if found is not None and not group:
        _refuse(f"{name} holds DTensors but no torch.distributed process group is initialized in this process",
                first, "no_process_group", "Call torch.distributed.init_process_group(...) on every rank first.",
                findings)
    stage = next((addr for addr, m in (modules or [("", model)])
                  if type(m).__module__.startswith("torch.distributed.pipelining")), None)
    if stage is not None:
        _refuse(f"{name} contains a pipeline-parallel stage ({stage or 'the model'}); pipeline schedules are not "
                "captured", stage or "model", "pipeline_parallel",
                "Capture each stage's module on its rank without the schedule, or the unsplit model.", findings)
    if backward:
        _refuse(f"a backward capture of {name} inside a process group is not tested", "trace(capture=...)",
                "backward", "Capture the forward only (CaptureOptions(backward=False)).", findings)
    if structure_only and found is not None and not simulated_mesh_active():
        _refuse(f"a structure-only capture of the sharded {name} is not supported by tracer.trace",
                first, "DTensor", "Use tracer.distributed.simulate(config, tp=..., fsdp=...).", findings)


def _refuse(message: str, site: str, state: str, remedy: str, findings: dict) -> None:
    extra = {k: v for k, v in findings.items() if k not in ("state", "site", "remedy")}
    raise DistributedCaptureUnsupportedError(message, site=site, state=state, remedy=remedy, **extra)


def _process_group_initialized() -> bool:
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


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
