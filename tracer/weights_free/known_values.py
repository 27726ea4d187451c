"""Which calls keep a value known on meta, and the same call replayed on known values (CPU).

A call's output has a known value when every tensor it reads has one and the call is deterministic;
factories from shapes and Python numbers start one. Used by `StructureOnlyGuard` with its ledger.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .constants import ConstantLedger

# Factories whose values are fixed by their Python arguments (on meta: the known value starts here).
VALUE_FACTORIES = frozenset({"ones", "zeros", "full", "arange", "range", "linspace", "logspace", "eye", "tensor",
                             "as_tensor", "scalar_tensor", "tril_indices", "triu_indices"})
UNINITIALIZED = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"})
RANDOM = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
                    "bernoulli", "multinomial", "poisson", "normal_", "uniform_", "bernoulli_", "exponential_",
                    "random_", "cauchy_", "log_normal_", "geometric_", "rrelu", "rrelu_"})
DROPOUTS = frozenset({"dropout", "dropout_", "alpha_dropout", "alpha_dropout_", "feature_alpha_dropout",
                      "dropout1d", "dropout2d", "dropout3d", "feature_dropout"})
# Calls that read only the shape and dtype of their first tensor (its values do not matter).
SHAPE_ONLY_FIRST = frozenset({"ones_like", "zeros_like", "full_like", "new_ones", "new_zeros", "new_full",
                              "new_tensor", "fill_", "zero_", "copy_"})
# Calls whose kernel may read the values of size or index arguments (a size given as a 0-dim tensor, a
# boolean mask index) but never those of their first tensor, whose shape alone matters: a meta kernel
# that refused one is answered from the other arguments' known values (`values_for(data_first=True)`).
DATA_FIRST = frozenset({"getitem", "pad", "interpolate", "view", "reshape", "repeat", "expand", "narrow", "split",
                        "tensor_split", "unflatten", "tile", "roll"})
# Value reads that return Python data.
PYTHON_READS = frozenset({"item", "tolist", "bool", "int", "float", "index", "complex", "local_scalar_dense",
                          "contains", "equal", "allclose"})
# Calls whose output shape depends on values.
SHAPE_READS = frozenset({"nonzero", "unique", "unique_consecutive", "masked_select", "bincount", "argwhere",
                         "repeat_interleave"})
_META = torch.device("meta")
_CPU = torch.device("cpu")


def is_random(kind: str, args: tuple, kwargs: dict) -> bool:
    """True for a call that draws random numbers (dropout only while training)."""
    if kind in RANDOM:
        return True
    if kind in DROPOUTS:
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        return bool(training) and p != 0
    return False


def reads_values(kind: str, args: tuple, kwargs: dict) -> bool:
    """Whether this value-read call really needs values: `repeat_interleave` with integer repeats (or an
    `output_size`) has a shape fixed by its arguments."""
    if kind != "repeat_interleave":
        return True
    repeats = kwargs.get("repeats", args[1] if len(args) > 1 else None)
    if len(args) == 1 and "repeats" not in kwargs and isinstance(args[0], Tensor):
        return True  # torch.repeat_interleave(repeats): the counts are the tensor itself
    return isinstance(repeats, Tensor) and kwargs.get("output_size") is None


def repeat_size(args: tuple, kwargs: dict, ledger: ConstantLedger) -> int | None:
    """The output size along `dim` of `x.repeat_interleave(repeats, dim)` when `repeats` has a known value."""
    if not args or not isinstance(args[0], Tensor):
        return None
    repeats = kwargs.get("repeats", args[1] if len(args) > 1 else None)
    known = ledger.value_of(repeats) if isinstance(repeats, Tensor) else None
    if known is None:
        return None
    dim = kwargs.get("dim", args[2] if len(args) > 2 else None)
    if known.numel() == 1:
        return int(known.reshape(())) * (args[0].shape[dim] if dim is not None else args[0].numel())
    return int(known.sum())


def values_for(kind: str, args: tuple, kwargs: dict, ledger: ConstantLedger,
               data_first: bool = False) -> tuple[tuple, dict] | None:
    """`(args, kwargs)` with every tensor replaced by its known value and meta devices by CPU, or None when a
    tensor the call reads has no known value. `data_first`: the first argument, when its value is not
    known, stands in as a tensor of its shape (only the output's shape may be taken from such a call)."""
    first = kind in SHAPE_ONLY_FIRST or data_first
    out_args = []
    for i, a in enumerate(args):
        v = _known(a, ledger, shape_only=first and i == 0)
        if v is _UNKNOWN:
            return None
        out_args.append(v)
    out_kwargs = {}
    for k, a in kwargs.items():
        v = _known(a, ledger, shape_only=False)
        if v is _UNKNOWN:
            return None
        out_kwargs[k] = v
    return tuple(out_args), out_kwargs


def pair_outputs(meta_out: Any, known_out: Any) -> list[tuple[Tensor, Tensor]]:
    """`(meta tensor, its known value)` for each output both calls produced alike (shape and dtype)."""
    if isinstance(meta_out, Tensor):
        metas, knowns = [meta_out], [known_out]
    elif isinstance(meta_out, (tuple, list)) and isinstance(known_out, (tuple, list)) and len(meta_out) == len(known_out):
        metas, knowns = list(meta_out), list(known_out)
    else:
        return []
    return [(m, k) for m, k in zip(metas, knowns) if isinstance(m, Tensor) and isinstance(k, Tensor)
            and m.shape == k.shape and m.dtype == k.dtype and k.device.type == "cpu"]


def to_meta(known_out: Any) -> Any:
    """The meta stand-in of a known result: same shapes, dtypes and structure."""
    if isinstance(known_out, Tensor):
        return known_out.to(_META)
    if isinstance(known_out, tuple) and hasattr(known_out, "_fields"):  # torch.return_types
        return type(known_out)(tuple(to_meta(v) for v in known_out))
    if isinstance(known_out, (tuple, list)):
        return type(known_out)(to_meta(v) for v in known_out)
    return known_out


def summarize(value: Any) -> Any:
    """A JSON-safe summary of a read's answer: small Python data as is, else its type and size."""
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
    if isinstance(value, (list, tuple)):
        flat = _flat(value, 17)
        if len(flat) <= 16 and all(isinstance(v, (bool, int, float)) for v in flat):
            return [summarize(v) for v in value] if all(not isinstance(v, (list, tuple)) for v in value) else str(value)
        return {"type": type(value).__name__, "length": len(value)}
    return type(value).__name__


class _Unknown:
    pass


_UNKNOWN = _Unknown()


def _known(a: Any, ledger: ConstantLedger, shape_only: bool) -> Any:
    if isinstance(a, Tensor):
        v = ledger.value_of(a)
        if v is not None:
            return v
        if shape_only and a.numel() <= ledger.budget - ledger.used:  # a stand-in only within the bound
            return torch.empty(a.shape, dtype=a.dtype, device=_CPU)  # values never read: only its shape
        return _UNKNOWN
    if isinstance(a, torch.device):
        return _CPU if a.type == "meta" else a
    if isinstance(a, str) and a == "meta":
        return "cpu"
    if type(a) in (list, tuple):
        out = [_known(b, ledger, False) for b in a]
        return _UNKNOWN if any(v is _UNKNOWN for v in out) else type(a)(out)
    if type(a) is slice:  # x[..., start:stop] with bounds given as tensors (a codec's trim)
        parts = [_known(b, ledger, False) for b in (a.start, a.stop, a.step)]
        return _UNKNOWN if any(v is _UNKNOWN for v in parts) else slice(*parts)
    return a


def _flat(value: Any, limit: int) -> list:
    out: list = []
    stack = [value]
    while stack and len(out) < limit:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        else:
            out.append(v)
    return out
