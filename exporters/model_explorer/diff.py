"""A trace diff as a Model Explorer graph collection (both graphs) with a per-node divergence overlay.

The two graphs keep the trace export's schema (`payload.to_graph_collection`); their ids say which
side they are, and every node gains a `diff` attribute saying what it matched and how far apart
the two are. The node data scores each node by `exporters.diff_overlay.divergence_scores`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracer.differ import TraceDiff
from tracer.ir import Trace

from ..diff_overlay import TITLE, divergence_scores, op_notes
from .check import validate_payload
from .payload import _GRADIENT, graph_id, to_graph_collection


def diff_graph_ids(diff: TraceDiff, a: Trace, b: Trace) -> dict[str, str]:
    """The graph id of each side: `a: GPT2LMHeadModel [OBSERVED]`, `b: ...`."""
    return {"a": f"a: {graph_id(a)}", "b": f"b: {graph_id(b)}"}


def diff_collection(diff: TraceDiff, a: Trace, b: Trace) -> dict[str, Any]:
    """Both traces in one `GraphCollection`, each node annotated with its side of the diff."""
    ids = diff_graph_ids(diff, a, b)
    graphs = []
    for side, trace in (("a", a), ("b", b)):
        graph = to_graph_collection(trace)["graphs"][0]
        graph["id"] = ids[side]
        notes = op_notes(diff, side)
        for node in graph["nodes"]:
            note = notes.get(node["id"])
            if note is not None:
                node["attrs"] = [*node.get("attrs", []), {"key": "diff", "value": note}]
        graph["groupNodeAttributes"][""] = {**graph["groupNodeAttributes"].get("", {}),
                                            "diff_side": f"{side}: {getattr(diff, side).description}"}
        graphs.append(graph)
    payload = {"label": f"diff: {diff.a.description} against {diff.b.description}", "graphs": graphs,
               "graphSorting": "node_count_desc"}
    validate_payload(payload)
    return payload


def diff_node_data(diff: TraceDiff, a: Trace, b: Trace) -> dict[str, Any]:
    """The divergence overlay as Model Explorer node data for both graphs (`{graph id: GraphNodeData}`)."""
    ids = diff_graph_ids(diff, a, b)
    out = {}
    for side in ("a", "b"):
        results = {label: {"value": score} for label, score in divergence_scores(diff, side).items()}
        out[ids[side]] = {
            "results": results, "name": TITLE, "thresholds": [], "gradient": [dict(g) for g in _GRADIENT],
            "hideInAggregatedStatsTable": False, "hideInChildrenStatsTable": False,
            "showExpandedSummaryOnGroupNode": False, "showLabelCountColumnsInChildrenStatsTable": False,
        }
    return out


def export_diff(diff: TraceDiff, a: Trace, b: Trace, path: str | Path) -> tuple[Path, Path]:
    """Write the collection to `path` and its node data to `<stem>.divergence.nodedata.json`; returns both."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(diff_collection(diff, a, b), ensure_ascii=False), encoding="utf-8")
    data = out.with_name(f"{out.stem}.divergence.nodedata.json")
    data.write_text(json.dumps(diff_node_data(diff, a, b)), encoding="utf-8")
    return out, data
