"""Weights-free capture: structure-only traces of meta-device models, admitted and guarded."""
from __future__ import annotations

from .admission import admit_structure_only
from .guard import StructureOnlyGuard
from ..model_summary import summarize_model  # eager or weights-free: it lives beside tracer.trace

__all__ = ["StructureOnlyGuard", "admit_structure_only", "summarize_model"]
