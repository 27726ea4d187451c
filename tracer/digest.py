"""The one content digest used for trace files, envelopes, claim tables and config fingerprints."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import msgspec


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys; non-JSON values are written as their `str`."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def canonical_rows_json(value: Any) -> str:
    """`canonical_json` of a value without floats, made of str, int, bool, None, lists, tuples and str-keyed dicts.

    msgspec writes these exactly as `canonical_json` does when the text is printable ASCII (sorted keys, no spaces),
    at a tenth of the cost; a text with other characters (json escapes them: non-ASCII, DEL) or a type msgspec
    refuses falls back to `canonical_json`. Floats are the caller's to exclude: msgspec writes `1e16` and NaN
    differently.
    """
    try:
        text = _SORTED.encode(value)
    except (TypeError, ValueError, OverflowError):
        return canonical_json(value)
    return text.decode() if text.isascii() and b"\x7f" not in text else canonical_json(value)


_SORTED = msgspec.json.Encoder(order="sorted")


def canonical_object_json(parts: Mapping[str, str]) -> str:
    """`canonical_json` of a dict with string keys, made from each value's canonical JSON text."""
    return "{" + ",".join(f"{json.dumps(k)}:{parts[k]}" for k in sorted(parts)) + "}"


def text_digest(text: str) -> str:
    """SHA-256 (hex) of a canonical JSON text."""
    return hashlib.sha256(text.encode()).hexdigest()


def canonical_digest(value: Any) -> str:
    """SHA-256 (hex) of `canonical_json(value)`."""
    return text_digest(canonical_json(value))
