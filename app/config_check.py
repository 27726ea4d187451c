"""A config JSON checked before anything is built: size, encoding, shape of the values, limits.

Everything transformers would choke on in a way we can see up front is refused typed here
(`config_invalid` or `limit_exceeded`); `build_checked` turns whatever is left into the same refusal.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TypeVar

from tracer.bounded_io import read_capped
from tracer.errors import ConfigInvalidError, InputTooLargeError, InputUnreadableError, InvalidInputError, TracerError

from .errors import LimitExceededError
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
    """The config's JSON object, refused typed when too big (read with a cap, not trusting the file's
    size), not a regular file, not UTF-8, not JSON, or out of shape."""
    raw = config_bytes(path)
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


def config_bytes(path: Path) -> bytearray:
    """The config file's bytes, at most the `config_bytes` limit, from a regular file only (a FIFO or a
    device is refused at once, typed, without blocking)."""
    limits = current()
    try:
        return read_capped(path, limits.config_bytes, what=f"the config file {path.name}")
    except InputTooLargeError:
        raise LimitExceededError(
            f"the config file {path.name} size in bytes is over the limit of {limits.config_bytes:,}", site=str(path),
            limit="config_bytes", value=limits.config_bytes + 1,
            remedy="If this is intended, raise the limit: torchlens-explore --limit config_bytes=BYTES") from None
    except InputUnreadableError as exc:
        raise invalid(path, f"cannot read it ({exc.message})") from None


def sub_configs(data: dict[str, Any], where: str = "", depth: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """The config and every config nested in it (`text_config`, `vision_config`, `encoder`, ...), each with
    its key path; lists of objects are walked too (depth-bounded)."""
    found = [(where, data)]
    if depth >= MAX_NESTING:
        return found
    for key, value in data.items():
        items = [(f"{where}.{key}" if where else key, value)] if isinstance(value, dict) else [
            (f"{where}.{key}[{i}]" if where else f"{key}[{i}]", v) for i, v in enumerate(value)
            if isinstance(v, dict)] if isinstance(value, list) else []
        for name, sub in items:
            found.extend(sub_configs(sub, name, depth + 1))
    return found


MAX_NESTING = 16  # sub-configs inside sub-configs (composite models nest two or three deep)


def check_values(path: Path, data: Any) -> None:
    """Refuse a config whose type or sizes cannot describe a model, or whose sizes pass the limits; the
    layers of every nested sub-config count toward the layer limit together with the top level's."""
    limits = current()
    if not isinstance(data, dict):
        raise invalid(path, f"the top level is a {type(data).__name__}, not an object")
    if not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise invalid(path, "model_type must be a name such as \"llama\"")
    total = 0
    for where, config in sub_configs(data):
        prefix = f"{where}." if where else ""
        for key in POSITIVE_KEYS if not where or "model_type" in config else (*LAYER_KEYS, *WIDTH_KEYS[:3]):
            value = config.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise invalid(path, f"{prefix}{key} is {value!r}; it must be a positive integer")
        for key in LAYER_KEYS:
            if config.get(key) is not None:
                limits.check("layers", config[key], f"{prefix}{key} in {path.name}", f"{path}: {prefix}{key}")
                total += config[key]
        for key in ("hidden_size", "n_embd", "d_model"):
            if config.get(key) is not None:
                limits.check("hidden_size", config[key], f"{prefix}{key} in {path.name}", f"{path}: {prefix}{key}")
        _check_shapes(path, config, f"{where}: " if where else "")
    limits.check("layers", total, f"the layers of {path.name} and its nested configs together", str(path))


def _check_shapes(path: Path, data: dict[str, Any], lead: str) -> None:
    """Heads divide the width, key/value heads divide the heads, rope_scaling is an object."""
    width = next((data[k] for k in ("hidden_size", "n_embd", "d_model") if data.get(k)), None)
    heads = next((data[k] for k in ("num_attention_heads", "n_head") if data.get(k)), None)
    if (isinstance(width, int) and isinstance(heads, int) and not isinstance(heads, bool) and not data.get("head_dim")
            and width % heads):
        raise invalid(path, f"{lead}the width {width} does not divide into {heads} attention heads")
    kv = data.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv, int) and not isinstance(kv, bool) and kv > 0 and heads % kv:
        raise invalid(path, f"{lead}{heads} attention heads do not divide into {kv} key/value heads")
    rope = data.get("rope_scaling")
    if rope is not None and not isinstance(rope, dict):
        raise invalid(path, f"{lead}rope_scaling is a {type(rope).__name__}; it must be an object or null")


def build_checked(path: Path, what: str, build: Callable[[], T]) -> T:
    """Run `build` (transformers work on the config); any untyped failure becomes `config_invalid`."""
    try:
        return build()
    except TracerError:
        raise
    except (Exception, RecursionError) as exc:  # transformers' own checks, in its words
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise invalid(path, f"{what} failed: {type(exc).__name__}: {text}") from None
