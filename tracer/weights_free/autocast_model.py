"""Autocast's dtype rules on meta: a structure-only capture inside `torch.autocast` records the dtypes
the real forward would have.

Autocast casts only tensors on its own device type, so on meta it casts nothing: a meta forward
inside `torch.autocast("cpu", torch.bfloat16)` computes float32 where the CPU forward computes
bfloat16. When autocast is on, at capture start, for the device type the meta model stands for (the
simulated device, else the CPU), each call with a floating output is also run on fake tensors of
that device type (no memory, no values) inside the same autocast state, and every meta output whose
dtype differs is cast to the dtype the fake run gave. What was modeled is disclosed in the
admission record (`autocast`); a call the fake run cannot take is listed there as not modeled.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor
from torch.utils import _pytree

_LISTED = 10  # calls named in the admission record's `not_modeled`


class AutocastModel:
    """Autocast's output dtypes for calls run on meta, by a fake-tensor run of the same call."""

    def __init__(self, device_type: str, admission: dict[str, Any]) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.device_type = device_type
        self.fake = FakeTensorMode(allow_non_fake_inputs=True)
        self.record = admission["autocast"] = {
            "device_type": device_type,
            "dtype": str(torch.get_autocast_dtype(device_type)).replace("torch.", ""),
            "rule": "on meta autocast casts nothing; each call's output dtypes are those of the same call on fake "
                    f"{device_type} tensors inside the same autocast state",
            "cast_outputs": 0, "not_modeled": [], "not_modeled_count": 0,
        }

    @classmethod
    def ambient(cls, device_type: str, admission: dict[str, Any]) -> "AutocastModel | None":
        """A model of the autocast state entered around the capture, or None when it is off for `device_type`."""
        try:
            on = torch.is_autocast_enabled(device_type)
        except (RuntimeError, TypeError):  # a device type autocast does not know
            return None
        return cls(device_type, admission) if on else None

    def wrap(self, run: Callable, func: Any, qualname: str) -> Callable:
        """`run` (the call on meta), its floating outputs cast to the dtypes autocast gives `func`'s."""
        def modeled(*args: Any, **kwargs: Any) -> Any:
            out = run(*args, **kwargs)
            metas = [t for t in _pytree.tree_leaves(out) if isinstance(t, Tensor)]
            if not any(t.is_floating_point() and t.is_meta for t in metas):
                return out
            dtypes = self._dtypes(func, args, kwargs, len(metas), qualname)
            if dtypes is None or all(t.dtype == d for t, d in zip(metas, dtypes)):
                return out
            casts = {id(t): d for t, d in zip(metas, dtypes) if t.dtype != d and t.is_meta}
            self.record["cast_outputs"] += len(casts)
            return _pytree.tree_map(lambda t: t.to(casts[id(t)]) if isinstance(t, Tensor) and id(t) in casts else t,
                                    out)
        return modeled

    def _dtypes(self, func: Any, args: tuple, kwargs: dict, count: int, qualname: str) -> list[torch.dtype] | None:
        """The output dtypes of `func` on fake tensors of the device type, or None (disclosed) when it cannot run."""
        device = self.device_type
        try:
            with self.fake:
                def fake(t: Any) -> Any:
                    if isinstance(t, Tensor) and t.is_meta:
                        return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device=device)
                    return t
                fa, fk = _pytree.tree_map(fake, (args, kwargs))
                got = [t.dtype for t in _pytree.tree_leaves(func(*fa, **fk)) if isinstance(t, Tensor)]
        except Exception:  # noqa: BLE001 - the side run's failure leaves the meta dtypes, disclosed
            got = None
        if got is None or len(got) != count:
            self.record["not_modeled_count"] += 1
            if len(self.record["not_modeled"]) < _LISTED and qualname not in self.record["not_modeled"]:
                self.record["not_modeled"].append(qualname)
            return None
        return got
