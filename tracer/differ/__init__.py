"""Comparing two traces: op matching by where ops ran, structural changes, numeric divergence, roll-ups."""
from __future__ import annotations

from .build import diff
from .records import ModuleRollup, OpDivergence, Tolerance
from .result import TraceDiff
from .store import load_diff
from .twins import compare, describe_model, twin_traces

__all__ = ["ModuleRollup", "OpDivergence", "Tolerance", "TraceDiff", "compare", "describe_model", "diff", "load_diff", "twin_traces"]
