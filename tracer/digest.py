"""The one content digest used for trace files, envelopes, claim tables and config fingerprints."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys; non-JSON values are written as their `str`."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def canonical_object_json(parts: Mapping[str, str]) -> str:
    """`canonical_json` of a dict with string keys, made from each value's canonical JSON text."""
    return "{" + ",".join(f"{json.dumps(k)}:{parts[k]}" for k in sorted(parts)) + "}"


def text_digest(text: str) -> str:
    """SHA-256 (hex) of a canonical JSON text."""
    return hashlib.sha256(text.encode()).hexdigest()


def canonical_digest(value: Any) -> str:
    """SHA-256 (hex) of `canonical_json(value)`."""
    return text_digest(canonical_json(value))
