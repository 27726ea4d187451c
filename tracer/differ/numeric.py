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

    Read in chunks of CHUNK elements (below torch's parallel grain, so no thread pool is woken: on a
    busy machine that costs more than the arithmetic) and widened chunk by chunk, so memory stays
    bounded. Only when a sum comes out non-finite are the non-finite elements counted and left out.
    """
    x, y = _flat(a), _flat(b)
    if x.numel() == 0:
        return 0.0, 0.0, 1.0, 0, 0
    stats = _sums(x, y, masked=False)
    bad_a = bad_b = 0
    if not all(math.isfinite(v) for v in stats):
        stats = _sums(x, y, masked=True)
        bad_a, bad_b = int(stats[5]), int(stats[6])
    max_abs, dd, xx, yy, xy = (max(0.0, v) if i else v for i, v in enumerate(stats[:5]))
    nd, na, nb = math.sqrt(dd), math.sqrt(xx), math.sqrt(yy)
    scale = max(na, nb)
    rel = nd / scale if scale > 0 else 0.0
    if na > 0 and nb > 0:
        cos = max(-1.0, min(1.0, xy / (na * nb)))
    else:
        cos = 1.0 if na == nb else 0.0
    return float(max_abs), float(min(rel, 2.0)), float(cos), bad_a, bad_b


CHUNK = 1 << 15  # at most torch's parallel grain size (32,768): each chunk runs on the calling thread


def _sums(x: torch.Tensor, y: torch.Tensor, masked: bool) -> list[float]:
    """[max |x-y|, sum (x-y)^2, sum x^2, sum y^2, sum x*y] (and, when `masked`, the non-finite counts of x
    and y, the sums taken over elements finite on both sides)."""
    parts = []
    for start in range(0, x.numel(), CHUNK):
        xs = x[start:start + CHUNK].to("cpu", torch.float64)
        ys = y[start:start + CHUNK].to("cpu", torch.float64)
        extra = []
        if masked:
            fa, fb = torch.isfinite(xs), torch.isfinite(ys)
            both = fa & fb
            extra = [(~fa).sum().to(torch.float64), (~fb).sum().to(torch.float64)]
            xs, ys = xs[both], ys[both]
        d = xs - ys
        top = d.abs().max() if d.numel() else torch.zeros((), dtype=torch.float64)
        # products summed elementwise, not torch.dot: BLAS may wake its own threads even for a short vector
        parts.append(torch.stack([top, (d * d).sum(), (xs * xs).sum(), (ys * ys).sum(), (xs * ys).sum(), *extra]))
    table = torch.stack(parts)
    return [table[:, 0].max().item(), *table[:, 1:].sum(0).tolist()]


def _flat(value: torch.Tensor) -> torch.Tensor:
    flat = value.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    return flat
