"""`tracer.summary(model, input_shape)` (also `tracer.summarize_model`): capture on dummy inputs, print the module tree.

A meta model is captured structure-only without being asked (the choice is recorded in the
trace's provenance); bytes and FLOPs are printed as labelled estimates, with the ladder state.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from .estimates import trace_totals
from .ir import Trace
from .claims.ladder import ladder_description
from .options import CaptureOptions



def summarize_model(model: nn.Module, input_shape: Sequence[int] = (1, 8), *, input_dtype: torch.dtype | None = None,
                    structure_only: bool | None = None, print_summary: bool = True,
                    return_trace: bool = False) -> str | tuple[str, Trace]:
    """Capture `model` on a dummy input of `input_shape` and return (and print) its text summary.

    Token-id models get int64 ids, others float inputs in the parameters' dtype. `structure_only`
    None decides by the model: meta parameters select structure-only capture.
    """
    from .tracing import trace

    meta = _is_meta(model)
    chosen = meta if structure_only is None else structure_only
    how = ("selected automatically: the model's parameters are on the meta device" if structure_only is None and meta
           else "requested" if structure_only else "eager: the model holds real values")
    x = _dummy_input(model, tuple(input_shape), input_dtype, "meta" if chosen else _device(model))
    result = trace(model, (x,), capture=CaptureOptions(structure_only=bool(chosen), save="none")).with_provenance(
        summary={"structure_only": bool(chosen), "how": how, "input_shape": list(input_shape),
                 "input_dtype": str(x.dtype).replace("torch.", "")})
    text = render_with_estimates(result)
    if print_summary:
        print(text)
    return (text, result) if return_trace else text


def render_with_estimates(trace: Trace) -> str:
    """The trace's summary framed by its ladder state and the labelled bytes/FLOPs estimates."""
    totals = trace_totals(trace)
    state = trace.ladder_state
    lines = [f"claim ladder: {state} ({ladder_description(state)})"]
    how = (trace.provenance.summary or {}).get("how")
    if trace.structure_only:
        lines.append("capture: structure-only on meta, no tensor values exist" + (f" ({how})" if how else ""))
    lines.append(trace.summary())
    lines.append(f"parameter bytes (declared geometry): {_bytes(totals['param_bytes'])}")
    lines.append(f"activation bytes (estimate from shapes): {_bytes(totals['activation_bytes_estimate'])}")
    lines.append(f"FLOPs (estimate from shapes): {_flops(totals['flops_estimate'])}")
    return "\n".join(lines)


def _is_meta(model: nn.Module) -> bool:
    for t in model.parameters():
        return t.is_meta
    return any(b.is_meta for b in model.buffers())


def _device(model: nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    return torch.device("cpu")


def _dummy_input(model: nn.Module, shape: tuple[int, ...], dtype: torch.dtype | None, device: Any) -> torch.Tensor:
    if dtype is None:
        dtype = torch.long if _takes_ids(model) else next((p.dtype for p in model.parameters()), torch.float32)
    return torch.zeros(shape, dtype=dtype, device=device)


def _takes_ids(model: nn.Module) -> bool:
    get = getattr(model, "get_input_embeddings", None)
    if get is not None:
        try:
            return isinstance(get(), nn.Embedding)
        except (NotImplementedError, AttributeError):
            return False
    first = next((m for m in model.modules() if m is not model), None)
    return isinstance(first, nn.Embedding)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    return str(n)


def _flops(n: int) -> str:
    for unit, size in (("TFLOPs", 1e12), ("GFLOPs", 1e9), ("MFLOPs", 1e6)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,} FLOPs"
