"""The backward graph in Model Explorer: a second graph in the collection, and its node-data overlays.

The backward graph is `tracer.backward.graph.backward_trace`, written by the forward's own payload
builder (`payload.to_graph_collection`), so it has the same namespaces (module layers), attributes
and checks; each node also names the forward op it differentiates (`forward_op`), its place in
the backward's execution order and, where it differentiates a forward op, that op's saved bytes.
Overlays: "saved_bytes" (bytes saved for the backward, each tensor once) and "grad_norm" (the
gradient norm, for a trace that kept its gradients), for either graph.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracer.backward.graph import backward_trace
from tracer.ir import Trace

from .. import overlays
from .check import validate_payload
from .payload import graph_id, node_data, to_graph_collection

BACKWARD_METRICS = overlays.BACKWARD_OVERLAYS


def with_backward(trace: Trace, *, keep_single_child_layers: bool = False) -> dict[str, Any]:
    """The forward graph and the backward graph of `trace` in one `GraphCollection` (validated)."""
    payload = to_graph_collection(trace, keep_single_child_layers=keep_single_child_layers)
    back = backward_trace(trace)
    graph = to_graph_collection(back, keep_single_child_layers=keep_single_child_layers)["graphs"][0]
    for node, op in zip(graph["nodes"], back.ops):
        node["attrs"] += [{"key": k, "value": str(v)} for k, v in _node_extras(op).items()]
    graph["groupNodeAttributes"][""]["backward_loss"] = back.backward.loss
    graph["groupNodeAttributes"][""]["backward_estimate"] = str(bool(back.backward.estimate)).lower()
    payload["graphs"].append(graph)
    payload["label"] = f"{payload['label']} · forward and backward"
    validate_payload(payload)
    return payload


def _node_extras(op: Any) -> dict[str, Any]:
    a = op.attrs
    if "backward_node" not in a:
        return {}
    return {"forward_op": a["forward_op"] or "-", "backward_order": "did not run" if a["order"] is None else a["order"],
            "linked": str(a["linked"]).lower()}


def backward_graph_id(trace: Trace) -> str:
    """The id of `trace`'s backward graph in the collection."""
    return graph_id(backward_trace(trace))


def backward_node_data(trace: Trace, metric: str, *, graph: str = "backward") -> dict[str, Any]:
    """One backward overlay ("saved_bytes" or "grad_norm") as Model Explorer node data for the "backward"
    or the "forward" graph of `trace`."""
    if metric not in BACKWARD_METRICS:
        raise overlays.OverlayOptionsError(f"unknown backward metric {metric!r}; pick one of {BACKWARD_METRICS}",
                                           site="exporters.model_explorer.backward_node_data", overlay=metric)
    return node_data(backward_trace(trace) if graph == "backward" else trace, metric)


def export_graphs(trace: Trace, path: str | Path) -> Path:
    """Write `trace`'s Model Explorer file: the forward graph, and the backward graph beside it when the trace has one."""
    if getattr(trace, "backward", None) is None:
        from .payload import export

        return export(trace, path)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(with_backward(trace), ensure_ascii=False), encoding="utf-8")
    return out


def export_with_backward(trace: Trace, path: str | Path) -> dict[str, Path]:
    """Write the two-graph collection to `path` and, beside it, one node-data file per backward overlay the
    trace offers, for each graph (`<stem>.<graph>.<metric>.nodedata.json`); returns what was written."""
    out = export_graphs(trace, path)
    written = {"graph": out}
    for metric in overlays.backward_overlays(trace):
        for which in ("forward", "backward"):
            target = out.with_name(f"{out.stem}.{which}.{metric}.nodedata.json")
            target.write_text(json.dumps(backward_node_data(trace, metric, graph=which)), encoding="utf-8")
            written[f"{which}.{metric}"] = target
    return written
