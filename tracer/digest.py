"""The one content digest used for trace files, envelopes, claim tables and config fingerprints."""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys; non-JSON values are written as their `str`."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def canonical_digest(value: Any) -> str:
    """SHA-256 (hex) of `canonical_json(value)`."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
