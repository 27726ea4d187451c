"""A value-free attention implementation for transformers' attention interface (`register_attention`).

Under sdpa (and flash) transformers builds the causal mask by reading the 2D mask's values
(`_ignore_causal_mask_sdpa` asks `padding_mask.all()` to skip the mask for `is_causal`); on meta there
are no values, so the masked text route refuses `value_dependent_branch`. `register_attention(model)`
registers, under one key per backend, an attention function that calls the backend the model already
uses and a mask function that always materialises the mask with index arithmetic alone (no skip, no
value read). A real forward computes what the chosen backend computes on that mask: bit-equal to eager
under eager; under sdpa the explicit causal mask stands in for `is_causal=True` (tests/tracer/
test_register_attention.py states the tolerance). Undo with `model.set_attn_implementation(backend)`.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from torch import nn

from ..errors import InvalidInputError

PREFIX = "tracer_value_free_"
BACKENDS = ("eager", "sdpa")


def key_for(backend: str) -> str:
    """The attention-interface key `register_attention` uses for `backend` ("eager" -> "tracer_value_free_eager")."""
    return PREFIX + backend


def backend_of(key: str | None) -> str | None:
    """The backend a registered key wraps (None when `key` is not one of ours)."""
    return key[len(PREFIX):] if isinstance(key, str) and key.startswith(PREFIX) else None


def register_attention(model: nn.Module, backend: str | None = None) -> str:
    """Switch `model` to the value-free implementation over `backend` (default: the model's own); returns the key.

    Idempotent: a model already switched keeps its key. Only eager and sdpa are wrapped; any other
    backend (flash, flex, paged) refuses typed, the model left as it was.
    """
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if not callable(getattr(model, "set_attn_implementation", None)) or config is None:
        raise InvalidInputError(f"{type(model).__name__} is not a transformers model with an attention interface",
                                site="register_attention(model=...)",
                                remedy="Pass a transformers PreTrainedModel (it has set_attn_implementation).")
    chosen = backend or backend_of(current) or current or "eager"
    if chosen not in BACKENDS:
        raise InvalidInputError(f"register_attention wraps {list(BACKENDS)}, not {chosen!r}",
                                site="register_attention(backend=...)", backend=chosen,
                                remedy="Build the model with attn_implementation='sdpa' or 'eager', or pass backend=.")
    key = key_for(chosen)
    _register(key, chosen)
    if current != key:
        model.set_attn_implementation(key)
    return key


def _register(key: str, backend: str) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(key, _attention_for(backend))
    AttentionMaskInterface.register(key, _mask_for(backend))


def _attention_for(backend: str) -> Callable[..., Any]:
    if backend == "sdpa":
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward
    return eager_attention


def eager_attention(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The calling model's own `eager_attention_forward` (each modeling file defines one)."""
    forward = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if forward is None:
        raise InvalidInputError(f"{type(module).__module__} defines no eager_attention_forward",
                                site=f"register_attention: {type(module).__name__}",
                                remedy="Use backend='sdpa' for this model.")
    return forward(module, *args, **kwargs)


def _mask_for(backend: str) -> Callable[..., Any]:
    from transformers.masking_utils import eager_mask, sdpa_mask

    build = eager_mask if backend == "eager" else sdpa_mask

    def value_free_mask(**kwargs: Any) -> Any:
        """The backend's mask, always materialised: the skips that read the mask's values are off."""
        kwargs["allow_is_causal_skip"] = False
        kwargs["allow_is_bidirectional_skip"] = False
        return build(**kwargs)

    value_free_mask.__name__ = f"value_free_{backend}_mask"
    return value_free_mask
