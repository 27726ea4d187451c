"""What a called torch function is: its kind, qualified name and whether it writes in place.

Cached per function object, so the hot path pays one dict lookup.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

# Dunder in-place operators (`x += y` calls Tensor.__iadd__).
_INPLACE_DUNDERS = frozenset(
    {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
     "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
     "__imatmul__"}
)

# Calls that only read metadata: they never produce a tensor, so they skip all bookkeeping.
_METADATA_NAMES = frozenset(
    {"dim", "size", "numel", "shape", "dtype", "device", "ndim", "ndimension", "is_cuda",
     "is_meta", "is_sparse", "is_quantized", "is_floating_point", "is_complex", "requires_grad",
     "is_leaf", "stride", "storage_offset", "is_contiguous", "element_size", "get_device",
     "data_ptr", "__len__", "__hash__", "__repr__", "__format__", "layout", "names", "_version",
     "grad_fn", "nelement", "untyped_storage", "_base", "is_nested", "is_mkldnn", "is_xpu",
     "is_mps", "output_nr", "_cdata", "itemsize", "nbytes", "__dlpack_device__", "__array_priority__"}
)

# Calls that read a tensor's values into Python: a structure-only capture cannot answer them.
VALUE_READ_NAMES = frozenset(
    {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__complex__", "numpy",
     "__array__", "nonzero", "any", "all", "equal", "allclose", "unique", "unique_consecutive",
     "masked_select", "bincount", "repeat_interleave", "argwhere", "_local_scalar_dense", "__contains__"}
)


class FuncInfo(NamedTuple):
    kind: str
    qualname: str
    inplace: bool
    metadata_only: bool
    value_read: bool
    func: Any = None  # the callable itself (names it in an op's call template)


INFO_CACHE: dict[Any, FuncInfo] = {}  # the hot path reads it directly (one dict lookup per call)
_cache = INFO_CACHE


def func_info(func: Any) -> FuncInfo:
    """Describe `func` (cached)."""
    try:
        return _cache[func]
    except KeyError:
        pass
    except TypeError:  # unhashable callables
        return _describe(func)
    info = _describe(func)
    _cache[func] = info
    return info


def _describe(func: Any) -> FuncInfo:
    from .boundaries import ScriptCall, describe_op_overload  # dispatcher / torch.library custom ops

    if isinstance(func, ScriptCall):
        return func.info
    op_info = describe_op_overload(func)
    if op_info is not None:
        return op_info
    name = getattr(func, "__name__", None) or type(func).__name__
    owner = None
    if name in ("__get__", "__set__"):
        # A property of Tensor, e.g. Tensor.T.__get__: name the property.
        descriptor = getattr(func, "__self__", None)
        prop = getattr(descriptor, "__name__", None)
        if prop:
            name = prop
            owner = "torch.Tensor"
    if owner is None:
        owner = _owner_name(func)
    qualname = f"{owner}.{name}" if owner else name
    inplace = name in _INPLACE_DUNDERS or (name.endswith("_") and not name.startswith("__") and not name.startswith("_"))
    kind = _kind_name(name)
    return FuncInfo(
        kind=kind,
        qualname=qualname,
        inplace=inplace,
        metadata_only=name in _METADATA_NAMES,
        value_read=name in VALUE_READ_NAMES,
        func=func,
    )


def _owner_name(func: Any) -> str:
    objclass = getattr(func, "__objclass__", None)  # method descriptors of TensorBase
    if objclass is not None:
        return "torch.Tensor"
    qual = getattr(func, "__qualname__", "") or ""
    if qual.startswith(("Tensor.", "TensorBase.", "_TensorBase.")):
        return "torch.Tensor"
    module = getattr(func, "__module__", None)
    if module in (None, "torch._C._VariableFunctions", "torch._C._nn", "torch._C._linalg",
                  "torch._C._special", "torch._C._fft"):
        if module is None:
            return "torch"
        return {"torch._C._nn": "torch.nn.functional", "torch._C._linalg": "torch.linalg",
                "torch._C._special": "torch.special", "torch._C._fft": "torch.fft"}.get(module, "torch")
    return module


def _kind_name(name: str) -> str:
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        return name[2:-2]
    return name.lstrip("_") or name
