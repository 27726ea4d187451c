"""Distributed capture: DTensor layouts and collectives on each rank, and simulated meshes (docs/distributed.md)."""
from __future__ import annotations

from .gather import fold, gather, select_ranks
from .simulate import simulate
from .validate import RankFinding, RankValidationReport, validate_rank

__all__ = ["RankFinding", "RankValidationReport", "fold", "gather", "select_ranks", "simulate", "validate_rank"]
