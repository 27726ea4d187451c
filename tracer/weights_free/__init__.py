"""Weights-free capture: structure-only traces of meta-device models, admitted and guarded."""
from __future__ import annotations

from .admission import admit_structure_only
from .guard import StructureOnlyGuard
from .summary_entry import summarize_model

__all__ = ["StructureOnlyGuard", "admit_structure_only", "summarize_model"]
