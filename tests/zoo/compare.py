"""Bit-equality of two model outputs of any nesting (tensors, tuples, dicts, ModelOutput)."""
from __future__ import annotations

from typing import Any

import torch


def bit_equal(a: Any, b: Any) -> bool:
    """True when `a` and `b` hold the same tensors bit for bit (NaN equal to NaN) in the same structure."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))
    if isinstance(a, dict) or hasattr(a, "to_tuple"):
        if not (isinstance(b, dict) or hasattr(b, "to_tuple")):
            return False
        ka, kb = [k for k, v in a.items() if v is not None], [k for k, v in b.items() if v is not None]
        return ka == kb and all(bit_equal(a[k], b[k]) for k in ka)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(bit_equal(x, y) for x, y in zip(a, b))
    if hasattr(a, "layers") and hasattr(a, "get_seq_length"):  # a transformers Cache: compare its tensors
        return bit_equal(_cache_tensors(a), _cache_tensors(b))
    return True


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_floating_point() or t.is_complex():
        return torch.nan_to_num(t, nan=0.0) if not torch.isnan(t).any() else t.view(-1).view(torch.uint8) \
            if t.is_contiguous() else t.contiguous().view(torch.uint8)
    return t


def _cache_tensors(cache: Any) -> list:
    return [[getattr(layer, k, None) for k in ("keys", "values")] for layer in getattr(cache, "layers", [])]
