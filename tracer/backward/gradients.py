"""Statistics of the saved gradients of op outputs (`BackwardPass.grads`), read chunk by chunk."""
from __future__ import annotations

from typing import Any

import torch

from ..tensor_stats import tensor_stats


def grad_stats(backward: Any, label: str) -> dict[str, float | int] | None:
    """Mean, std, min, max, L2 norm and non-finite count of the gradient of op `label`'s output (None: not saved)."""
    g = backward.grads.get(label) if backward is not None else None
    if not isinstance(g, torch.Tensor) or g.is_meta or not g.numel():
        return None
    return tensor_stats(g.abs() if g.is_complex() else g)


def grad_norms(backward: Any) -> dict[str, float]:
    """The L2 norm of every saved op-output gradient, by op label."""
    out = {}
    for label in backward.grads:
        stats = grad_stats(backward, label)
        if stats is not None:
            out[label] = float(stats["norm"])
    return out
