"""The admission gate for meta-device state: admit structure-only capture or refuse, typed.

Called by `tracer.trace` when `structure_only` is set or any parameter/input is on meta.
It only reads the model and inputs; a refusal changes nothing.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from ..distributed.admission import is_dtensor, simulated_mesh_active
from ..capture.walk import iter_tensors, params_and_buffers
from ..errors import (DistributedCaptureUnsupportedError, MetaStateWithoutFlagError, MixedSubstrateError,
                      OffloadEvidenceMissingError, RealStateWithStructureOnlyError,
                      UnsupportedTensorStateError)
from . import known_inputs
from .guard import StructureOnlyGuard

_MAX_NAMED = 8  # tensors named per side in a refusal
EMPTY_WEIGHTS_REMEDY = (
    "Only buffers hold real values: accelerate.init_empty_weights() leaves buffers on the CPU by default. "
    "Build with init_empty_weights(include_buffers=True), or under `with torch.device('meta'):`."
)
LEGACY_CONSTRUCTOR_REMEDY = (
    "A model built under `with torch.device('meta'):` keeps on the CPU what legacy constructors make "
    "(torch.Tensor(n), torch.FloatTensor(...), torch.LongTensor(...)) and what torch.normal(mean, std, size) "
    "draws: they ignore the device context. Move them with model.to('meta') before tracing (a structure-only "
    "capture reads no values), or build with accelerate's init_empty_weights(include_buffers=True)."
)


def admit_structure_only(model: nn.Module, args: tuple, kwargs: Mapping[str, Any], capture: Any, *,
                         state: tuple[list, list] | None = None, given_buffers: list | None = None
                         ) -> tuple[StructureOnlyGuard | None, dict[str, Any], tuple[tuple, dict]]:
    """Admit a capture involving meta tensors: `(guard, admission record, (args, kwargs))`, or raise an
    AdmissionError. Under `structure_only`, real inputs enter as meta tensors whose values are known
    (`known_inputs`): the returned inputs are the ones the forward is given.

    `state` is `capture.walk.params_and_buffers(model)`, already made (else made here); `given_buffers` the real
    buffers swapped for meta copies for this capture (`tracer.weights_free.known_buffers.swapped_for_meta`), whose values are known."""
    state = _state(model, state)
    inputs = input_tensors(args, kwargs)
    for name, t in state + inputs:
        _check_tensor_state(name, t)
    meta_state = [n for n, t in state if t.is_meta]
    real_state = [n for n, t in state if not t.is_meta]
    meta_in = [p for p, t in inputs if t.is_meta]
    real_in = [p for p, t in inputs if not t.is_meta]
    if not capture.structure_only:
        return (*_without_flag(model, state, meta_state, real_state, meta_in, real_in), (args, dict(kwargs)))
    if state and not meta_state:
        raise RealStateWithStructureOnlyError(
            f"{type(model).__name__} holds real values ({len(real_state)} parameters/buffers on "
            f"{_devices(state)}); a weights-free view is built from the config, not from a loaded model",
            site="trace(capture=CaptureOptions(structure_only=True))", real_state=real_state[:_MAX_NAMED],
        )
    if real_state:
        err = _mixed("the model's state is split between meta and real devices", meta_state, real_state)
        if all(n.startswith("buffer:") for n in real_state):
            err.remedy = EMPTY_WEIGHTS_REMEDY
        elif len(real_state) < len(meta_state):  # a meta build with a few stragglers
            err.remedy = LEGACY_CONSTRUCTOR_REMEDY
        raise err
    swapped: list = []
    if real_in:
        args, kwargs, swapped = known_inputs.to_meta_inputs(tuple(args), dict(kwargs))
        left = [p for p, t in input_tensors(args, kwargs) if not t.is_meta]  # inside objects: not swapped
        if left:
            raise _mixed("the model is on meta but inputs inside objects hold real values (tensors directly in "
                         "args, kwargs, lists, tuples and dicts enter with known values; these do not)",
                         meta_state + meta_in, left)
    admission = {
        "mode": "structure_only",
        "substrate": "meta",
        "reason": "CaptureOptions(structure_only=True); every parameter and buffer is on meta" + (
            f"; {len(swapped)} input(s) given with values enter as meta tensors whose values are known"
            if swapped else ", and every input"),
        "parameters": sum(1 for n, _ in state if n.startswith("param:")),
        "buffers": sum(1 for n, _ in state if n.startswith("buffer:")),
        "inputs": len(inputs),
    }
    if capture.simulate_device is not None:
        admission["simulated_device"] = capture.simulate_device
    guard = StructureOnlyGuard(model, admission, simulate_device=capture.simulate_device)
    if swapped:
        admission["known_inputs"] = known_inputs.know(guard.constants, swapped)
    if given_buffers:
        admission["known_buffers"] = known_inputs.know(guard.constants, given_buffers, given="buffers", field="buffer")
        admission["reason"] += f"; {len(given_buffers)} real buffer(s) enter as meta tensors whose values are known"
    return guard, admission, (tuple(args), dict(kwargs))


def _without_flag(model: nn.Module, state: list, meta_state: list, real_state: list, meta_in: list,
                  real_in: list) -> tuple[None, dict[str, Any]]:
    if not real_state and not real_in:
        raise MetaStateWithoutFlagError(
            f"every parameter, buffer and input of {type(model).__name__} is on the meta device, which holds "
            f"no values; an eager capture needs values",
            site="trace(capture=CaptureOptions())", meta_state=len(meta_state), meta_inputs=meta_in[:_MAX_NAMED],
        )
    if meta_in:
        raise _mixed("some inputs are on meta but the capture is eager", meta_in, real_in + real_state)
    uncovered = [n for n in meta_state if not _offload_hooked(model, n.split(":", 1)[1])]
    if uncovered:
        raise OffloadEvidenceMissingError(
            f"{len(uncovered)} parameters/buffers are on meta and no accelerate offload hook will load them",
            site=_bare(uncovered[:1])[0], meta_without_hook=_bare(uncovered[:_MAX_NAMED]),
        )
    return None, {"mode": "eager", "reason": "meta parameters are loaded by accelerate offload hooks",
                  "offloaded": len(meta_state)}


def refuse_fake_or_functional(args: tuple, kwargs: Mapping[str, Any], state: tuple[list, list]) -> None:
    """An eager capture of fake or functional tensors (or under an active FakeTensorMode / FunctionalTensorMode)
    refused, typed: their kernels compute no values, so neither the recorded values nor a replay would be real."""
    params, buffers = state
    for prefix, table in (("param:", params), ("buffer:", buffers), ("", input_tensors(args, kwargs))):
        for name, t in table:
            cls = type(t)
            if (cls is torch.Tensor or cls is nn.Parameter) and not torch._is_functional_tensor(t):
                continue  # the common case, read in two checks
            _refuse_fake_or_functional(prefix + name, t)
    mode = _fake_or_functional_mode()
    if mode is not None:
        raise UnsupportedTensorStateError(
            f"a {mode} is active: every tensor the forward makes would be {mode.replace('TensorMode', '').lower()}",
            site="trace()", state=mode,
            remedy="Call tracer.trace outside the mode, on real tensors (or on meta with structure_only=True).")


def _refuse_fake_or_functional(name: str, t: torch.Tensor) -> None:
    kind = _unsupported_kind(t)
    if kind in ("fake", "functional"):
        raise UnsupportedTensorStateError(
            f"{name} is a {kind} tensor, which an eager capture does not admit (it computes no values)",
            site=name, tensor=name, state=kind,
            remedy="Capture real tensors eagerly, or build the model on meta and capture it with "
                   "CaptureOptions(structure_only=True) outside FakeTensorMode.")


def _fake_or_functional_mode() -> str | None:
    """The name of an active FakeTensorMode or FunctionalTensorMode on this thread's dispatch stack, else None."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    for mode in _get_current_dispatch_mode_stack():
        name = type(mode).__name__
        if name in ("FakeTensorMode", "FunctionalTensorMode"):
            return name
    return None


def input_tensors(args: tuple, kwargs: Mapping[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """`(path, tensor)` of every input, named as the trace names them (`args.0`, `kwargs.attention_mask`)."""
    return list(iter_tensors(list(args), "args")) + list(iter_tensors(dict(kwargs), "kwargs"))


def _state(model: nn.Module, state: tuple[list, list] | None) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer, named `param:<address>` / `buffer:<address>`, in torch's order."""
    params, buffers = params_and_buffers(model) if state is None else state
    return [(f"param:{name}", p) for name, p in params] + [(f"buffer:{name}", b) for name, b in buffers]


def _check_tensor_state(name: str, t: torch.Tensor) -> None:
    kind = _unsupported_kind(t)
    if kind is None:
        return
    if kind == "DTensor" and simulated_mesh_active():  # tracer.distributed.simulate: meta shards on a fake mesh
        return
    if kind == "DTensor":
        raise DistributedCaptureUnsupportedError(
            f"{name} is a DTensor (sharded across a device mesh); structure-only capture needs one process's "
            f"full model", site=name, tensor=name, state=kind)
    raise UnsupportedTensorStateError(f"{name} is a {kind} tensor, which structure-only capture does not admit",
                                      site=name, tensor=name, state=kind)


def _unsupported_kind(t: torch.Tensor) -> str | None:
    cls = type(t)
    if is_dtensor(t):  # shared with trace()'s entry refusal (tracer.distributed.admission)
        return "DTensor"
    if cls.__name__ == "FakeTensor" or cls.__module__.startswith("torch._subclasses.fake"):
        return "fake"
    if cls.__module__.startswith("bitsandbytes"):
        return f"quantized ({cls.__name__})"
    if t.is_quantized:
        return "quantized"
    if t.is_nested:
        return f"nested ({t.layout})"
    if t.layout != torch.strided:
        return f"sparse ({t.layout})"
    if torch._is_functional_tensor(t) or cls.__name__ == "FunctionalTensor":
        return "functional"
    return None


def _offload_hooked(model: nn.Module, address: str) -> bool:
    parts = address.split(".")[:-1]
    module = model
    if getattr(module, "_hf_hook", None) is not None:
        return True
    for part in parts:
        module = getattr(module, part, None)
        if module is None:
            return False
        if getattr(module, "_hf_hook", None) is not None:
            return True
    return False


def _mixed(what: str, meta_side: list, real_side: list) -> MixedSubstrateError:
    return MixedSubstrateError(
        f"{what}: {len(meta_side)} on meta ({_few(meta_side)}), {len(real_side)} real ({_few(real_side)})",
        site=_bare(real_side[:1])[0] if real_side else None, meta_side=_bare(meta_side[:_MAX_NAMED]),
        real_side=_bare(real_side[:_MAX_NAMED]),
    )


def _few(names: list) -> str:
    shown = ", ".join(_bare(names[:3]))
    return shown + (", ..." if len(names) > 3 else "")


def _bare(names: list) -> list[str]:
    return [n.split(":", 1)[1] if n.startswith(("param:", "buffer:")) else n for n in names]


def _devices(state: list) -> str:
    return ", ".join(sorted({str(t.device) for _, t in state}))
