"""Many small tensors at once: equality of pairs and noise-perturbed copies, a few kernel calls per shape.

Validation compares every replayed op with its recorded value and every perturbed replay with it
again; for small tensors the per-call cost of torch dominates, so tensors of one shape, dtype and
device are stacked and compared (or perturbed) together. Only plain strided tensors of at most
`SMALL` elements are stacked; anything else is handled one by one, with the same result.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..store.values import row_major

SMALL = 1 << 14  # elements: a larger tensor gains nothing from a batch and is handled on its own
_Tensor = torch.Tensor
_STRIDED = torch.strided


# Floating dtypes torch stores but does no arithmetic or comparison on (CPU kernels raise "not implemented"):
# compared and perturbed in float32, which holds each of their values exactly.
NARROW_FLOATS = frozenset(d for d in (getattr(torch, n, None) for n in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")) if d is not None)


def nested_parts(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors a nested tensor is made of: a jagged one's values, offsets (and lengths), a strided
    one's rows."""
    if t.layout == torch.jagged:
        lengths = t.lengths()
        return [t.values(), t.offsets(), *([lengths] if lengths is not None else [])]
    return list(t.unbind())


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal values (NaN where both are NaN), same shape and dtype; nested tensors part by part."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_nested or b.is_nested:
        if not (a.is_nested and b.is_nested and a.layout == b.layout):
            return False
        pa, pb = nested_parts(a), nested_parts(b)
        return len(pa) == len(pb) and all(same(x, y) for x, y in zip(pa, pb))
    if a.dtype in NARROW_FLOATS:
        a, b = a.float(), b.float()
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        nan = a.isnan() & b.isnan()
        return bool(nan.any()) and bool(((a == b) | nan).all())
    return False


def _small(t: object) -> bool:
    return type(t) is _Tensor and t.layout is _STRIDED and t.numel() <= SMALL and t.dtype not in NARROW_FLOATS


def row_major_small(t: object) -> bool:
    """A plain tensor of at most SMALL elements laid out row-major (exact strides): `noisy_each` takes it."""
    return _small(t) and t.stride() == row_major(tuple(t.shape))  # type: ignore[union-attr]


def equal_each(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[bool]:
    """`same(a, b)` for each pair; small plain tensors of one shape, dtype and device are compared together."""
    result = [False] * len(pairs)
    groups: dict[tuple, list[int]] = {}
    for i, (a, b) in enumerate(pairs):
        shape, dtype = a.shape, a.dtype
        if b.shape != shape or b.dtype != dtype:
            continue
        if _small(a) and _small(b):
            groups.setdefault((shape, dtype, a.device), []).append(i)
        else:
            result[i] = same(a, b)
    for members in groups.values():
        try:
            flags = _equal_stacked([pairs[i] for i in members])
        except RuntimeError:  # e.g. a recorded value on another device: one by one
            flags = [same(*pairs[i]) for i in members]
        for i, flag in zip(members, flags):
            result[i] = flag
    return result


def _equal_stacked(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[bool]:
    return equal_rows(torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs]))


def equal_rows(a: torch.Tensor, b: torch.Tensor) -> list[bool]:
    """`same(a[i], b[i])` for each index of the leading dimension of two tensors of one shape and dtype."""
    if torch.equal(a, b):
        return [True] * len(a)
    eq = a == b
    if a.is_floating_point() or a.is_complex():
        eq |= a.isnan() & b.isnan()
    return eq.reshape(len(a), -1).all(dim=1).tolist()


def noisy_each(tensors: Sequence[torch.Tensor], gen: torch.Generator) -> list[torch.Tensor]:
    """Each tensor (floating or complex, `row_major_small`) plus standard normal noise drawn from `gen` in
    float32 and cast (as a perturbation of one tensor draws it), as new row-major tensors."""
    out: list[torch.Tensor | None] = [None] * len(tensors)
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.shape, t.dtype, t.device), []).append(i)
    for (shape, dtype, device), members in groups.items():
        stacked = torch.stack([tensors[i] for i in members])
        noise = torch.randn(stacked.shape, generator=gen, dtype=torch.float32).to(dtype=dtype, device=device)
        for i, t in zip(members, (stacked + noise).unbind(0)):
            out[i] = t
    return out  # type: ignore[return-value]
