"""`compare(model, inputs, against=...)`: build the twin, capture both sides on the same inputs and
seed, and diff them. Twins: a dtype, an attention backend, LoRA merged, or a second model."""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import torch
from torch import nn

from ..errors import CompareTwinError, CompareTwinUnavailableError, DiffInputError
from ..ir import Trace
from ..options import CaptureOptions
from .build import diff
from .result import TraceDiff

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "half": torch.float16, "fp32": torch.float32, "float32": torch.float32, "fp64": torch.float64,
          "float64": torch.float64}
BACKENDS = ("eager", "sdpa", "flash_attention_2", "flex_attention")
MERGED = ("lora-merged", "merged")
INT8 = ("int8", "8bit", "bnb-int8")
DTYPE_TOLERANCE_EPS = 1  # a dtype twin's default rtol: this many machine epsilons of the lower precision


@dataclass(frozen=True)
class Twin:
    """The second side: its model, how to adapt the inputs, what it is, and the tolerance it suggests."""

    model: nn.Module
    adapt_inputs: Callable[[Any], Any]
    description: str
    rtol: float | None = None


def compare(model: nn.Module, args: Any = (), input_kwargs: Mapping[str, Any] | None = None, *, against: Any,
            rtol: float | None = None, atol: float = 1e-5, seed: int = 0,
            capture: CaptureOptions = CaptureOptions()) -> TraceDiff:
    """Trace `model` and its twin named by `against` on the same inputs and seed; return their diff.

    `against`: a dtype (torch.bfloat16, "bf16", "fp16"), an attention backend ("eager", "sdpa"),
    "int8" (bitsandbytes LLM.int8() linear layers), "lora-merged" (a peft model against its merged
    copy) or a second nn.Module. `model` is never changed.
    A model on the meta device (weights-free) gives a structure diff.
    """
    side_a, side_b, twin = twin_traces(model, args, input_kwargs, against=against, seed=seed, capture=capture)
    chosen = rtol if rtol is not None else (twin.rtol if twin.rtol is not None else 1e-3)
    return diff(side_a, side_b, rtol=chosen, atol=atol, describe_a=describe_model(model),
                describe_b=twin.description)


def twin_traces(model: nn.Module, args: Any = (), input_kwargs: Mapping[str, Any] | None = None, *, against: Any,
                seed: int = 0, capture: CaptureOptions = CaptureOptions()) -> tuple[Trace, Trace, Twin]:
    """The traces of `model` and of its twin (same inputs, same seed) and the twin itself."""
    from ..tracing import trace

    if not isinstance(model, nn.Module):
        raise DiffInputError(f"compare() needs an nn.Module, got {type(model).__name__}", site="compare(model=...)")
    twin = make_twin(model, against)
    if any(p.is_meta for p in model.parameters()):
        capture = replace(capture, structure_only=True)  # weights-free: both sides capture structure only
    kwargs = dict(input_kwargs or {})
    side_a = _seeded(seed, lambda: trace(_base(model, against), args, kwargs, capture=capture))
    side_b = _seeded(seed, lambda: trace(twin.model, twin.adapt_inputs(args), twin.adapt_inputs(kwargs),
                                         capture=capture))
    return side_a, side_b, twin


def make_twin(model: nn.Module, against: Any) -> Twin:
    """The twin `against` names (see `compare`); refused typed when it names none."""
    if isinstance(against, nn.Module):
        return Twin(against, _same, f"{type(against).__name__} (second model)")
    if isinstance(against, torch.dtype) or (isinstance(against, str) and against.lower() in DTYPES):
        return _dtype_twin(model, against if isinstance(against, torch.dtype) else DTYPES[against.lower()])
    if isinstance(against, str) and against in BACKENDS:
        return _backend_twin(model, against)
    if isinstance(against, str) and against.lower() in MERGED:
        return _merged_twin(model)
    if isinstance(against, str) and against.lower() in INT8:
        return _int8_twin(model)
    raise CompareTwinError(f"against={against!r} names no twin", site="compare(against=...)")


def _dtype_twin(model: nn.Module, dtype: torch.dtype) -> Twin:
    if not dtype.is_floating_point:
        raise CompareTwinError(f"{dtype} is not a floating dtype", site="compare(against=...)")
    twin = copy.deepcopy(model).to(dtype)
    eps = max(torch.finfo(dtype).eps, _model_eps(model))
    return Twin(twin, lambda x: _cast_floats(x, dtype), f"{type(model).__name__} in {str(dtype).removeprefix('torch.')}",
                rtol=DTYPE_TOLERANCE_EPS * eps)


def _model_eps(model: nn.Module) -> float:
    for p in model.parameters():
        if p.is_floating_point():
            return torch.finfo(p.dtype).eps
    return 0.0


def _backend_twin(model: nn.Module, backend: str) -> Twin:
    if not callable(getattr(model, "set_attn_implementation", None)):
        raise CompareTwinError(f"{type(model).__name__} has no attention backend to switch (not a transformers model)",
                               site=f"compare(against={backend!r})")
    twin = copy.deepcopy(model)
    try:
        twin.set_attn_implementation(backend)
    except (ValueError, ImportError) as exc:
        raise CompareTwinUnavailableError(f"{type(model).__name__} cannot run attention backend {backend!r}: {exc}",
                                          site=f"compare(against={backend!r})") from None
    return Twin(twin, _same, f"{type(model).__name__} with attention {backend}")


def _int8_twin(model: nn.Module) -> Twin:
    from .int8_twin import int8_copy

    twin, replaced = int8_copy(model)
    return Twin(twin, _same, f"{type(model).__name__} with {replaced} linear layers in bitsandbytes LLM.int8()")


def _merged_twin(model: nn.Module) -> Twin:
    if not callable(getattr(model, "merge_and_unload", None)):
        raise CompareTwinError(f"{type(model).__name__} is not a peft model with adapters to merge",
                               site="compare(against='lora-merged')",
                               remedy="Pass a peft model (get_peft_model(...)) for a merged-against-unmerged twin.")
    merged = copy.deepcopy(model).merge_and_unload()
    return Twin(merged, _same, f"{type(merged).__name__} with LoRA merged")


def _base(model: nn.Module, against: Any) -> nn.Module:
    """Side a's module: a peft model is traced through its base model, so addresses line up with the merged twin."""
    if isinstance(against, str) and against.lower() in MERGED:
        return model.get_base_model()
    return model


def describe_model(model: nn.Module) -> str:
    """A model in a few words: class, parameter dtypes, attention backend."""
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    backend = getattr(getattr(model, "config", None), "_attn_implementation", None)
    extra = f", attention {backend}" if backend else ""
    return f"{type(model).__name__} in {'/'.join(dtypes) or 'no params'}{extra}"


def _seeded(seed: int, fn: Callable[[], Any]) -> Any:
    """`fn()` with torch's generator seeded inside a fork (the caller's RNG state is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fn()


def _same(x: Any) -> Any:
    return x


def _cast_floats(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast_floats(v, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _cast_floats(v, dtype) for k, v in x.items()}
    return x
