"""Numeric divergence of two saved values: max abs, relative L2, cosine and non-finite counts."""
from __future__ import annotations

import math
from typing import Any

import torch

from ..ir import Op
from .records import OpDivergence
from .structure import scope_of


def op_divergence(x: Op, y: Op, value_a: Any, value_b: Any) -> OpDivergence | None:
    """The distance between `x`'s and `y`'s values (None when either is not a tensor or the shapes differ)."""
    if not (isinstance(value_a, torch.Tensor) and isinstance(value_b, torch.Tensor)):
        return None
    if value_a.shape != value_b.shape or value_a.is_meta or value_b.is_meta:
        return None
    numel = value_a.numel()
    if value_a.dtype == value_b.dtype and value_a.device == value_b.device and torch.equal(value_a, value_b):
        bad = 0 if not value_a.is_floating_point() else int((~torch.isfinite(value_a)).sum())
        metrics = (0.0, 0.0, 1.0, bad, bad)
    else:
        metrics = distance(value_a, value_b)
    max_abs, rel, cos, bad_a, bad_b = metrics
    return OpDivergence(label_a=x.label, label_b=y.label, index=x.index, func=x.func, module=x.module,
                        scope=scope_of(x), numel=numel, max_abs=max_abs, rel_l2=rel, cosine=cos,
                        non_finite_a=bad_a, non_finite_b=bad_b)


def distance(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float, int, int]:
    """(max abs, relative L2, cosine, non-finite in a, non-finite in b) of two same-shaped tensors, in float64.

    One pass over the full tensors; only when a norm comes out non-finite are the non-finite
    elements counted and left out (the slow path).
    """
    x, y = _wide(a), _wide(b)
    if x.numel() == 0:
        return 0.0, 0.0, 1.0, 0, 0
    stats = _stats(x, y)
    bad_a = bad_b = 0
    if not all(math.isfinite(v) for v in stats):
        finite_a, finite_b = torch.isfinite(x), torch.isfinite(y)
        bad_a, bad_b = int((~finite_a).sum()), int((~finite_b).sum())
        both = finite_a & finite_b
        x, y = x[both], y[both]
        if x.numel() == 0:
            return 0.0, 0.0, 1.0, bad_a, bad_b
        stats = _stats(x, y)
    max_abs, nd, na, nb, dot = stats
    scale = max(na, nb)
    rel = nd / scale if scale > 0 else 0.0
    if na > 0 and nb > 0:
        cos = max(-1.0, min(1.0, dot / (na * nb)))
    else:
        cos = 1.0 if na == nb else 0.0
    return float(max_abs), float(min(rel, 2.0)), float(cos), bad_a, bad_b


def _stats(x: torch.Tensor, y: torch.Tensor) -> list[float]:
    d = x - y
    return torch.stack([d.abs().max(), torch.linalg.vector_norm(d), torch.linalg.vector_norm(x),
                        torch.linalg.vector_norm(y), torch.dot(x, y)]).tolist()


def _wide(value: torch.Tensor) -> torch.Tensor:
    flat = value.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    return flat.to("cpu", torch.float64)
