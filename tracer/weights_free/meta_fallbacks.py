"""Meta fallbacks: output rules for kernels whose meta implementation refuses what the real kernel runs.

A structure-only capture runs every call on meta. A few meta kernels are stricter than the real
kernel: torch's meta `_grouped_mm` demands bfloat16 (the CUDA kernel's rule) while the CPU kernel
runs float32 and float16 too. For a kernel listed in `RULES`, the output's shape and dtype come from
the kernel's documented rule (checked against the CPU kernel by tests/tracer/test_meta_fallbacks.py);
the op is recorded normally and every use is disclosed in the admission record
(`meta_fallbacks`). A kernel without a rule, or inputs outside its rule, keeps the typed refusal.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

# _grouped_mm on CPU: both operands in one of these dtypes; the output has mat_a's dtype.
_GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
GROUPED_MM_RULE = ("the documented shape rule of torch.nn.functional.grouped_mm (2-D/3-D operands, groups by offs) "
                   "and the CPU kernel's layout and dtype rules (16-byte aligned leading strides; both operands float32, bfloat16 or float16; output in mat_a's "
                   "dtype); torch's meta kernel accepts bfloat16 only")
# Messages of a meta kernel that needed a tensor's value: a value read inside the kernel, not a missing kernel.
VALUE_READ_MESSAGES = ("cannot be called on meta tensors", "Cannot copy out of meta tensor",
                       "data-dependent", "data dependent",
                       "register_meta function for torch.nonzero()")  # a boolean-mask index: its size is its values


def _grouped_mm(mat_a: Tensor, mat_b: Tensor, offs: Tensor | None = None, bias: Tensor | None = None,
                out_dtype: torch.dtype | None = None) -> Tensor | None:
    """The meta output of `torch._grouped_mm` as the CPU kernel gives it, or None outside its rule."""
    if (mat_a.dtype != mat_b.dtype or mat_a.dtype not in _GROUPED_MM_DTYPES or bias is not None
            or out_dtype not in (None, mat_a.dtype) or {mat_a.dim(), mat_b.dim()} - {2, 3}
            or not (_aligned(mat_a) and _aligned(mat_b))):
        return None
    groups = offs.size(0) if offs is not None and offs.dim() == 1 else None
    a, b = mat_a.shape, mat_b.shape
    if mat_a.dim() == 2 and mat_b.dim() == 2:  # both jagged along the contraction: one output per group
        shape = (groups, a[0], b[1]) if groups is not None and a[1] == b[0] else None
    elif mat_a.dim() == 3 and mat_b.dim() == 3:  # a batched matmul: no offsets
        shape = (a[0], a[1], b[2]) if offs is None and a[0] == b[0] and a[2] == b[1] else None
    elif mat_a.dim() == 2:  # rows of mat_a grouped by offs, one mat_b per group
        shape = (a[0], b[2]) if groups == b[0] and a[1] == b[1] else None
    else:  # one mat_a per group, columns of mat_b grouped by offs
        shape = (a[1], b[1]) if groups == a[0] and a[2] == b[0] else None
    return torch.empty(shape, dtype=mat_a.dtype, device="meta") if shape is not None else None


def _aligned(t: Tensor) -> bool:
    """The kernel's layout check: the leading stride of a row- or column-major matrix is a multiple of 16 bytes."""
    rows, cols = t.stride()[-2:]
    lead = cols if rows == 1 and cols >= max(1, t.shape[-2]) else rows if cols == 1 else None
    return lead is not None and lead * t.element_size() % 16 == 0


# qualname -> (rule computing the meta output from the call's arguments, its description)
RULES: dict[str, tuple[Callable[..., Tensor | None], str]] = {
    "torch._grouped_mm": (_grouped_mm, GROUPED_MM_RULE),
}


def fallback_output(qualname: str, args: tuple, kwargs: dict) -> tuple[Tensor, str] | None:
    """`(meta output, rule)` for a call whose meta kernel refused, or None when no rule covers it."""
    entry = RULES.get(qualname)
    if entry is None or not all(t.is_meta for t in _tensors(args, kwargs)):
        return None
    rule, description = entry
    try:
        out = rule(*args, **kwargs)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):  # outside the rule too: keep the refusal
        return None
    return (out, description) if out is not None else None


def disclosure(qualname: str, out: Tensor, rule: str, op_index: int, site: str | None) -> dict[str, Any]:
    """The admission record's entry for one op whose meta output came from a fallback rule."""
    return {"call": qualname, "op_index": op_index, "shape": list(out.shape),
            "dtype": str(out.dtype).replace("torch.", ""), "rule": rule, "site": site}


def reads_values(exc: BaseException) -> bool:
    """True when a meta kernel raised because it needed a tensor's value (e.g. a size given as tensors)."""
    text = str(exc)
    return any(m in text for m in VALUE_READ_MESSAGES)


def _tensors(args: tuple, kwargs: dict) -> list[Tensor]:
    return [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
