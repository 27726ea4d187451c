"""Model Explorer: the graph payload, its checks, node-data overlays and the served read-back."""
from __future__ import annotations

from .check import PayloadReport, rebuild_with_graph_builder, validate_payload
from .payload import (CLAIM_COLORS, NODE_DATA_METRICS, export, export_node_data, graph_id, node_data,
                      to_graph_collection)
from .server import ModelExplorerServer, open_url, serve

__all__ = [
    "CLAIM_COLORS", "NODE_DATA_METRICS", "ModelExplorerServer", "PayloadReport", "export", "export_node_data",
    "graph_id", "node_data", "open_url", "rebuild_with_graph_builder", "serve", "to_graph_collection",
    "validate_payload",
]
