"""What surrounded a capture: the torch modes active around it, and the wrap generation it ran under.

Both are read by `describe_twin` just before the capture enters its own modes, and sealed into the
evidence envelope as their own fields (`ambient_modes`, `wrap_generation`, locked against `evolve`).

The one process-wide wrapper the tracer installs is `torch.autograd.Function.apply`'s pass-through
(tracer.capture.boundaries; everything else is scoped). A capture that finds another holder in that
slot (torch's own, the first time; a wrapper some other code installed since) installs the pass-through
over it: the generation counts those holders, so two traces with one generation ran under the same
wrapping, and a later generation says which holder the pass-through replaced.
"""
from __future__ import annotations

import threading
from typing import Any

import torch

_HOLDERS: list[Any] = []  # every non-pass-through holder of Function.apply seen before a capture, in order
_LOCK = threading.Lock()


def _name(obj: Any) -> str:
    inner = getattr(obj, "__func__", obj)
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', type(inner).__name__)}"


def _mode_names(stack: list[Any]) -> list[str]:
    names = []
    for mode in stack:
        name = f"{type(mode).__module__}.{type(mode).__qualname__}"
        device = getattr(mode, "device", None)
        names.append(f"{name}({device})" if device is not None else name)
    return names


def ambient_modes() -> dict[str, Any]:
    """The torch function and dispatch modes active now (outermost first), grad, inference and autocast state."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    autocast = {}
    for device in ("cpu", "cuda"):
        if torch.is_autocast_enabled(device):
            autocast[device] = str(torch.get_autocast_dtype(device)).replace("torch.", "")
    return {"torch_function": _mode_names(_get_current_function_mode_stack()),
            "torch_dispatch": _mode_names(_get_current_dispatch_mode_stack()),
            "grad_enabled": torch.is_grad_enabled(), "inference_mode": torch.is_inference_mode_enabled(),
            "autocast": autocast}


def wrap_generation() -> dict[str, Any]:
    """The pass-through generation the coming capture runs under, and what holds `Function.apply` before it."""
    from ..capture.boundaries import PASS_THROUGH, apply_is_torchs

    holder = torch.autograd.Function.__dict__.get("apply")
    with _LOCK:
        if holder is not PASS_THROUGH and not any(h is holder for h in _HOLDERS):
            _HOLDERS.append(holder)
        generation = len(_HOLDERS)
    if holder is PASS_THROUGH:
        before = "tracer pass-through"
    elif apply_is_torchs():
        before = "torch"
    else:
        before = f"{_name(holder)} (installed by other code; the capture installs the pass-through over it)"
    return {"generation": max(generation, 1), "function_apply": before}
