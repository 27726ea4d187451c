"""Real buffers of a meta model in a structure-only capture: their values are known, the weights' are not.

`accelerate.init_empty_weights()` (its default, `include_buffers=False`) builds parameters on meta and
leaves buffers real on the CPU: rotary frequencies, a codec's padding sizes (`nn.Buffer(k - s)`),
position ids. Those values come from the config, and a forward reads them (`if length <= padding`),
so a capture that drops them refuses what it could answer. Here, for the capture only, each such buffer
is swapped for a meta tensor like it and its values become that tensor's known value
(`known_inputs.know`, within the ledger's bound): a read answered from it is disclosed with basis
"buffers", and the real buffers are put back when the capture ends, whatever happened. Each is listed
in `provenance["admission"]["known_buffers"]`. A buffer's value may also come from a checkpoint (a
norm's running statistics): the discharge against the real twin then judges the reads made from it.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from .constants import meta_like

_PLAIN = (Tensor, nn.Buffer) if hasattr(nn, "Buffer") else (Tensor,)


@contextlib.contextmanager
def swapped_for_meta(walked: list[tuple[str, nn.Module]], capture: Any) -> Iterator[list[tuple[str, Tensor, Tensor]]]:
    """Under `structure_only`, when every parameter is on meta: each real dense buffer replaced by a meta tensor
    like it while the block runs, put back after; yields `(address, meta, real)` for each (empty otherwise)."""
    swaps: list[tuple[nn.Module, str, Tensor, Tensor, str]] = []
    if capture.structure_only and _parameters_all_meta(walked):
        seen: dict[int, Tensor] = {}  # a buffer shared by two modules gets one meta copy
        for prefix, module in walked:
            for key, real in module._buffers.items():
                if real is None or real.is_meta or type(real) not in _PLAIN or real.layout != torch.strided \
                        or real.is_quantized:
                    continue
                meta = seen.get(id(real))
                if meta is None:
                    meta = seen[id(real)] = meta_like(real)
                swaps.append((module, key, real, meta, f"{prefix}.{key}" if prefix else key))
    try:
        for module, key, _real, meta, _address in swaps:
            module._buffers[key] = meta
        yield [(address, meta, real) for _m, _k, real, meta, address in swaps]
    finally:
        for module, key, real, _meta, _address in swaps:
            module._buffers[key] = real


def _parameters_all_meta(walked: list[tuple[str, nn.Module]]) -> bool:
    found = False
    for _prefix, module in walked:
        for p in module._parameters.values():
            if p is None:
                continue
            if not p.is_meta:
                return False
            found = True
    return found
