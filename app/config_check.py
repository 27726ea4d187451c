"""A config JSON checked before anything is built: size, encoding, shape of the values, limits.

Everything transformers would choke on in a way we can see up front is refused typed here
(`config_invalid` or `limit_exceeded`); `build_checked` turns whatever is left into the same refusal.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TypeVar

from tracer.errors import ConfigInvalidError, InvalidInputError, TracerError

from .limits import current

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers",
              "num_encoder_layers", "encoder_layers", "decoder_layers")
WIDTH_KEYS = ("hidden_size", "n_embd", "d_model", "intermediate_size", "n_inner", "ffn_dim", "head_dim")
POSITIVE_KEYS = (*LAYER_KEYS, *WIDTH_KEYS, "num_attention_heads", "n_head", "num_key_value_heads",
                 "vocab_size", "max_position_embeddings", "n_positions", "n_ctx")
REMEDY = "Fix the config JSON (sizes are positive integers, model_type is a known name) or pick a shipped config."

T = TypeVar("T")


def invalid(path: Path, why: str) -> InvalidInputError:
    """The refusal for a config that cannot be used (`config_invalid`)."""
    return ConfigInvalidError(f"{path.name} is not a usable config: {why}", site=str(path), remedy=REMEDY)


def read_config(path: Path) -> dict[str, Any]:
    """The config's JSON object, refused typed when too big, not UTF-8, not JSON, or out of shape."""
    limits = current()
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise invalid(path, f"cannot read it ({exc.strerror})") from None
    limits.check("config_bytes", size, f"the config file {path.name} size in bytes", str(path))
    try:
        raw = path.read_bytes()[: limits.config_bytes + 1]
    except OSError as exc:
        raise invalid(path, f"cannot read it ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(path, f"not UTF-8 text (first bad byte at offset {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid(path, f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except (RecursionError, ValueError):
        raise invalid(path, "not JSON that can be read (nested too deep or a number too long)") from None
    check_values(path, data)
    return data


def check_values(path: Path, data: Any) -> None:
    """Refuse a config whose type or sizes cannot describe a model, or whose sizes pass the limits."""
    limits = current()
    if not isinstance(data, dict):
        raise invalid(path, f"the top level is a {type(data).__name__}, not an object")
    if not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise invalid(path, "model_type must be a name such as \"llama\"")
    for key in POSITIVE_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise invalid(path, f"{key} is {value!r}; it must be a positive integer")
    for key in LAYER_KEYS:
        if key in data and data[key] is not None:
            limits.check("layers", data[key], f"{key} in {path.name}", f"{path}: {key}")
    for key in ("hidden_size", "n_embd", "d_model"):
        if key in data and data[key] is not None:
            limits.check("hidden_size", data[key], f"{key} in {path.name}", f"{path}: {key}")
    width = next((data[k] for k in ("hidden_size", "n_embd", "d_model") if data.get(k)), None)
    heads = next((data[k] for k in ("num_attention_heads", "n_head") if data.get(k)), None)
    if width and heads and not data.get("head_dim") and width % heads:
        raise invalid(path, f"the width {width} does not divide into {heads} attention heads")
    kv = data.get("num_key_value_heads")
    if heads and kv and heads % kv:
        raise invalid(path, f"{heads} attention heads do not divide into {kv} key/value heads")
    rope = data.get("rope_scaling")
    if rope is not None and not isinstance(rope, dict):
        raise invalid(path, f"rope_scaling is a {type(rope).__name__}; it must be an object or null")


def build_checked(path: Path, what: str, build: Callable[[], T]) -> T:
    """Run `build` (transformers work on the config); any untyped failure becomes `config_invalid`."""
    try:
        return build()
    except TracerError:
        raise
    except (Exception, RecursionError) as exc:  # transformers' own checks, in its words
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise invalid(path, f"{what} failed: {type(exc).__name__}: {text}") from None
