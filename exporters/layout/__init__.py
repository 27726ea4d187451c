"""Nesting-aware layered layout of a trace: groups, DAG placement, routing, style and the engine."""
from __future__ import annotations

from .engine import LayoutEngine, compute_layout, default_expansion, group_tree, toggle
from .result import Layout, LayoutEdge, LayoutFrame, LayoutNode

__all__ = ["Layout", "LayoutEdge", "LayoutEngine", "LayoutFrame", "LayoutNode", "compute_layout", "default_expansion",
           "group_tree", "toggle"]
