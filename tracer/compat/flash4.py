"""FlashAttention 4 (`flash_attn.cute.interface`): found on the search path without importing it, and the
declared per-output dependence of its autograd Functions.

FA4's `FlashAttnFunc` / `FlashAttnVarlenFunc` return `(out, lse)`: `out` reads q, k and v; the log-sum-exp
reads the scores alone, never `v` (argument 2). The capture records each call as one boundary op; the
replay's perturbation check (`tracer.replay.interpreter.FOREIGN_DEPENDENCE`, seeded from `DEPENDENCE`)
then excuses exactly the `v -> lse` edge. Keys are the names the capture records, so nothing is imported.
Checked on CPU with a stand-in package at that import path only (tests/tracer/test_doctor_detectors.py);
GPU not run.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "flash_attn"
INTERFACE = "flash_attn.cute.interface"
# forward(ctx, ...) argument counts of the two Functions (flash_attn/cute/interface.py)
_ARGUMENTS = {"FlashAttnFunc": 18, "FlashAttnVarlenFunc": 25}
_V = 2  # q, k, v are arguments 0, 1, 2 of both


def _lse_reads(count: int) -> frozenset[str]:
    return frozenset(str(i) for i in range(count) if i != _V)


DEPENDENCE: dict[str, dict[int, frozenset[str]]] = {
    f"{INTERFACE}.{name}": {1: _lse_reads(count)} for name, count in _ARGUMENTS.items()}


def interface_file() -> Path | None:
    """`flash_attn/cute/interface.py` under the top-level package's search path; imports nothing."""
    try:
        spec = importlib.util.find_spec(PACKAGE)  # a top-level name: finders only, no import
    except (ImportError, ValueError):
        return None
    for location in (getattr(spec, "submodule_search_locations", None) or ()) if spec is not None else ():
        candidate = Path(location) / "cute" / "interface.py"
        if candidate.is_file():
            return candidate
    return None


def distributions() -> list[str]:
    """The installed distributions that provide `flash_attn` (e.g. flash-attn-4, or FA2's flash-attn, which
    may ship a `cute` folder too); read from package metadata, importing nothing."""
    import importlib.metadata

    return sorted(importlib.metadata.packages_distributions().get(PACKAGE, []))


def has_flash_attention_4_interface() -> bool:
    """True when the FA4 interface module is on the search path (read now, not cached)."""
    return interface_file() is not None


HAS_FLASH_ATTENTION_4_INTERFACE: bool = has_flash_attention_4_interface()  # at import; the doctor reads it anew
