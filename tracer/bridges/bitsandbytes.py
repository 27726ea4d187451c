"""bitsandbytes 8-bit and 4-bit layers: disclose the quantization state a capture cannot attribute.

`Linear8bitLt` computes from its int8 state (`state.CB`/`SCB`) and `Linear4bit` from its
`quant_state` (absmax, code, offset): tensors that are not parameters of the model. The
capture records them as constants; this bridge names those reads in one warning and marks
the trace not verified, so validation never passes a quantized model as if it were dense.
"""
from __future__ import annotations

import warnings
from typing import Any

from torch import nn

from ..ir import CONSTANT_KIND, Op


class QuantizedStateWarning(UserWarning):
    """A quantized layer computed from state outside the parameter contract."""


def quantized_modules(model: nn.Module, modules: list | None = None) -> dict[str, str]:
    """Address -> class name of every bitsandbytes layer in `model` (`modules`: a walk already made)."""
    from ..capture.walk import named_modules

    return {addr: type(m).__name__ for addr, m in (modules if modules is not None else named_modules(model))
            if type(m).__module__.startswith("bitsandbytes")}


def disclose(ops: tuple[Op, ...], model: nn.Module, findings: Any, modules: list | None = None) -> None:
    """Name the ops that read quantization state; mark the trace not verified (one warning)."""
    layers = quantized_modules(model, modules)
    if not layers:
        return
    by_label = {op.label: op for op in ops}
    inside = [op for op in ops if any(addr in layers for addr, _ in op.module_stack)]
    state = [op.label for op in inside if op.kind == CONSTANT_KIND]
    readers = sorted({op.label for op in inside for e in op.parents if e.source in state},
                     key=lambda lab: by_label[lab].index)
    kinds = sorted(set(layers.values()))
    msg = (f"bitsandbytes: {len(layers)} quantized layer(s) ({', '.join(kinds)}) compute from quantization state "
           f"outside the parameter contract: {len(state)} state tensor(s) read as constants "
           f"({', '.join(state[:8])}{', ...' if len(state) > 8 else ''}) by {', '.join(readers[:8])}"
           f"{', ...' if len(readers) > 8 else ''}; the trace is not verified (dequantized values are not "
           "the dense weights)")
    findings.unverified(msg, state + readers)
    findings.add(quantization={"library": "bitsandbytes", "layers": len(layers), "classes": kinds,
                               "state_ops": state, "reader_ops": readers})
    warnings.warn(msg, QuantizedStateWarning, stacklevel=3)


def quantization_method(model: nn.Module) -> str | None:
    """`quantization_config.quant_method` of a transformers model, else a quantizing package found in its modules."""
    cfg = getattr(getattr(model, "config", None), "quantization_config", None)
    if cfg is not None:
        method = cfg.get("quant_method") if isinstance(cfg, dict) else getattr(cfg, "quant_method", None)
        if method is not None:
            return str(getattr(method, "value", method)).lower()
    from ..capture.walk import named_modules

    for _addr, m in named_modules(model):
        package = type(m).__module__.split(".")[0]
        if package in _QUANT_PACKAGES:
            return _QUANT_PACKAGES[package]
    return None


_QUANT_PACKAGES: dict[str, Any] = {  # the quantizing packages' own top-level names (a user's gptq.py is none)
    "bitsandbytes": "bitsandbytes", "auto_gptq": "gptq", "gptqmodel": "gptq", "awq": "awq",
}
