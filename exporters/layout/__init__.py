"""Nesting-aware layered layout of a trace: groups, DAG placement, style and the engine."""
from __future__ import annotations

from .engine import (Layout, LayoutEdge, LayoutFrame, LayoutNode, compute_layout, default_expansion, group_tree,
                     toggle)

__all__ = ["Layout", "LayoutEdge", "LayoutFrame", "LayoutNode", "compute_layout", "default_expansion", "group_tree",
           "toggle"]
