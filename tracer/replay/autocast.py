"""Autocast in replay: an op the forward ran inside `torch.autocast` is replayed inside it again.

Autocast casts a call's floating arguments on the way into the kernel (float32 to the region's
lower-precision dtype for matmul-like kernels, the reverse for kernels it keeps in float32), so the
capture sees float32 arguments and a bfloat16 output, or the other way round. Outside the region
the same call gives another dtype. The recorded output dtype says which region it was: a replay
that gave float32 where bfloat16 or float16 is recorded is tried again inside
`torch.autocast(<device type>, <recorded dtype>)`, one that gave a lower-precision dtype where
float32 is recorded inside `torch.autocast(<device type>, <that dtype>)`. The retry is evidence only
when it reproduces the recorded value bit for bit; `validate` discloses every op replayed so.
"""
from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import torch

from ..ir import Op

_LOWER = {"bfloat16": torch.bfloat16, "float16": torch.float16}
_AUTOCAST_DEVICES = frozenset({"cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla"})


class Region(NamedTuple):
    """An autocast region: the device type and its lower-precision dtype."""

    device_type: str
    dtype: torch.dtype

    def describe(self) -> str:
        return f"autocast({self.device_type}, {str(self.dtype).replace('torch.', '')})"

    def entered(self) -> Any:
        """The region as a context (the cast cache off: replay keeps no state between calls)."""
        return torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=False)


def region_for(op: Op, got: Any, parent_dtypes: Any = ()) -> Region | None:
    """The autocast region `op`'s recorded dtype shows it ran in, given what a replay outside it gave
    (`got`; None when that replay raised, as a matmul of bfloat16 and float32 arguments does: then the
    lower-precision dtype is the recorded one, or one of `parent_dtypes`)."""
    out = op.out
    if out is None:
        return None
    device_type = str(out.device).split(":", 1)[0]
    if device_type not in _AUTOCAST_DEVICES:
        return None
    if got is None:
        lower = _LOWER.get(out.dtype) or next((d for d in parent_dtypes if d in _LOWER.values()), None)
        return Region(device_type, lower) if lower is not None else None
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(out.shape):
        return None
    have = str(got.dtype).replace("torch.", "")
    if out.dtype in _LOWER and have == "float32":  # a lower-precision kernel (linear, matmul, conv)
        return Region(device_type, _LOWER[out.dtype])
    if out.dtype == "float32" and have in _LOWER:  # a kernel autocast keeps in float32 (losses, norms)
        return Region(device_type, _LOWER[have])
    return None


def entered(region: Region | None) -> Any:
    """`region` entered, or a no-op context for None."""
    return contextlib.nullcontext() if region is None else region.entered()
