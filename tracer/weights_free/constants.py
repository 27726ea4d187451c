"""Constants of a structure-only capture: small real tensors made from Python numbers inside the forward.

`torch.tensor(4)` in model code holds nothing hidden: its value is in the source. Such a tensor
(and what is computed from constants alone) is admitted and recorded; a real tensor that
carries data from outside the forward still refuses (see `StructureOnlyGuard`).
"""
from __future__ import annotations

import weakref
from typing import Any

from torch import Tensor

FROM_PYTHON_DATA = frozenset({"torch.tensor", "torch.as_tensor", "torch.scalar_tensor"})
MAX_CONSTANT_NUMEL = 64  # a constant is small: a window, a scale, a few ids


def is_python_data(value: Any, depth: int = 0) -> bool:
    """True for a Python number or bool, or a (nested) list/tuple of them."""
    if isinstance(value, (bool, int, float, complex)):
        return True
    if isinstance(value, (list, tuple)) and depth < 4:
        return all(is_python_data(v, depth + 1) for v in value)
    return False


class ConstantLedger:
    """The constants admitted during one capture, by identity, with what made them."""

    def __init__(self) -> None:
        self._live: dict[int, weakref.ref] = {}
        self.records: list[dict[str, Any]] = []

    def holds(self, t: Tensor) -> bool:
        """True when `t` is a constant admitted earlier in this capture."""
        ref = self._live.get(id(t))
        return ref is not None and ref() is t

    def makes_constant(self, qualname: str, args: tuple, kwargs: dict, real_args: list[Tensor]) -> bool:
        """A call from Python data (`torch.tensor(4)`), or one whose real tensor arguments are all constants."""
        if qualname in FROM_PYTHON_DATA:
            return bool(args) and is_python_data(args[0]) and not real_args
        return bool(real_args) and all(self.holds(t) for t in real_args)

    def admit(self, t: Tensor, qualname: str, site: str | None) -> bool:
        """Record `t` as a constant when it is small; False (not admitted) otherwise."""
        if t.numel() > MAX_CONSTANT_NUMEL:
            return False
        self._live[id(t)] = weakref.ref(t)
        self.records.append({"call": qualname, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                             "device": str(t.device), "site": site})
        return True
