"""The bitsandbytes 8-bit twin: a copy of the model whose linear layers are `bnb.nn.Linear8bitLt`.

Every `nn.Linear` (and transformers' `Conv1D`, whose weight is stored transposed) except those named
in `skip` (by default the output head, as transformers' `load_in_8bit` leaves it) becomes an
LLM.int8() layer holding the same weights, quantized when the copy is placed on the model's device.
Nothing of the original model changes. bitsandbytes is imported here, lazily.
"""
from __future__ import annotations

import copy
from typing import Iterable

import torch
from torch import nn

from ..errors import CompareTwinUnavailableError

DEFAULT_SKIP = ("lm_head",)


def int8_copy(model: nn.Module, skip: Iterable[str] = DEFAULT_SKIP) -> tuple[nn.Module, int]:
    """A deep copy of `model` with its linear layers in LLM.int8(); returns (copy, layers replaced)."""
    try:
        import bitsandbytes as bnb
    except ImportError as exc:
        raise CompareTwinUnavailableError(f"bitsandbytes is not importable ({exc})", site="compare(against='int8')",
                                          remedy="pip install bitsandbytes") from None
    skip = tuple(skip)
    twin = copy.deepcopy(model)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    replaced = 0
    for name, module in list(twin.named_modules()):
        if not name or any(name == s or name.endswith("." + s) for s in skip):
            continue
        weight = _dense_weight(module)
        if weight is None:
            continue
        bias = getattr(module, "bias", None)
        q = bnb.nn.Linear8bitLt(weight.shape[1], weight.shape[0], bias=bias is not None, has_fp16_weights=False,
                                threshold=6.0)
        q.load_state_dict({"weight": weight.detach().clone(), **({"bias": bias.detach().clone()} if bias is not None else {})})
        parent, _, child = name.rpartition(".")
        setattr(twin.get_submodule(parent) if parent else twin, child, q.to(device))
        replaced += 1
    if not replaced:
        raise CompareTwinUnavailableError(f"{type(model).__name__} has no linear layer to quantize",
                                          site="compare(against='int8')")
    return twin.eval() if not model.training else twin, replaced


def _dense_weight(module: nn.Module) -> torch.Tensor | None:
    """The (out, in) weight of a dense layer: nn.Linear's own, transformers' Conv1D's transposed."""
    if type(module) is nn.Linear:
        return module.weight
    if type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers"):
        return module.weight.t()
    return None
