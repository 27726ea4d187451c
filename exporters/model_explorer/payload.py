"""Trace -> Google Model Explorer graph JSON (a `GraphCollection`), plus a per-node data overlay.

One node per op (inputs, outputs and constants included). A node's `namespace` is its
module's address with dots as slashes and each part followed by its class, e.g.
`transformer (GPT2Model)/h (ModuleList)/0 (GPT2Block)`, so modules collapse into layers named with
their class; a module that ran more than once gets `:call` on its name for calls after the first. Model outputs that
share a top-level name (a KV cache's tensors) lie in one layer, `cache (64 outputs)`, so they
open folded rather than as a row of root nodes. Edges are the
target's `incomingEdges`: `sourceNodeOutputId` is the producer's output index within its
call, `targetNodeInputId` the edge's ordinal among the target's inputs (its argument
path is in `inputsMetadata`). The trace's ladder state is in the graph id, the collection
label, the graph-level attributes and every node's `claim_state` attribute.

Nothing here imports `model_explorer`: writing JSON needs the IR only. The rebuild check
and the server live in `check` and `server` beside this module.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec

from tracer.atomic_write import write_atomic
from tracer.estimates import trace_totals
from tracer.ir import INPUT_KIND, OUTPUT_KIND, Op, Trace
from tracer.module_tree import module_param_counts
from tracer.gc_policy import gc_paused

from .. import overlays
from ..errors import ModelExplorerWriteError
from ..overlays import CLAIM_COLORS
from .check import collapsed_layers, validate_payload
from .distributed import distributed_attrs

NODE_DATA_METRICS = ("parameters", "output_bytes", "flops", "claim_state")
IO_GROUP_MIN = 3  # this many model outputs (or inputs) under one top-level name fold into one layer

_GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 1, "bgColor": "#e6550d"}]


# -- the graph --------------------------------------------------------------------------
def graph_id(trace: Trace) -> str:
    """The graph's id: model class and ladder state, e.g. `LlamaForCausalLM [HYPOTHESIS]`."""
    return f"{trace.model_class} [{trace.ladder_state}]"


def to_graph_collection(trace: Trace, *, keep_single_child_layers: bool = False) -> dict[str, Any]:
    """The trace as a Model Explorer `GraphCollection` payload (plain JSON-ready dicts).

    `keep_single_child_layers` keeps a module holding one op as its own layer (Model
    Explorer flattens such layers by default).
    """
    with gc_paused():  # 10 small containers per op, none in a cycle: the cyclic GC would walk them again and again
        return _graph_collection(trace, keep_single_child_layers)


def _graph_collection(trace: Trace, keep_single_child_layers: bool) -> dict[str, Any]:
    layers = _Layers(trace)
    io_groups = io_namespaces(trace)
    ladder = trace.ladder_state
    out_ids = {op.label: _num(op.output_index) for op in trace.ops}
    nodes = [_node(op, trace, io_groups.get(op.label) or layers.namespace(op), ladder, out_ids) for op in trace.ops]
    if not keep_single_child_layers:
        _name_collapsed(nodes, layers)
    graph = {
        "id": graph_id(trace),
        "nodes": nodes,
        "groupNodeAttributes": {"": _graph_attributes(trace), **layers.attributes(), **_io_attributes(trace, io_groups)},
        "layoutConfigs": {"keepLayersWithASingleChild": bool(keep_single_child_layers)},
    }
    return {
        "label": f"{trace.model_class} · {ladder}",
        "graphs": [graph],
        "graphSorting": "node_count_desc",
    }


def _name_collapsed(nodes: list[dict[str, Any]], layers: "_Layers") -> None:
    """A module layer Model Explorer will collapse (one op inside) names its node instead: `lm_head: Linear`
    rather than `linear_225` (issue 36); the op's label stays the node's id and its `op` attribute."""
    by_id = {n["id"]: n for n in nodes}
    for node_id, namespaces in collapsed_layers(nodes).items():
        names = [layers.display_name(ns) for ns in namespaces]
        names = [x for x in names if x]
        if not names:
            continue
        node = by_id[node_id]
        node["label"] = "/".join(names)
        node["attrs"].insert(0, {"key": "op", "value": node_id})


def export(trace: Trace, path: str | Path, *, keep_single_child_layers: bool = False,
           indent: int | None = None) -> Path:
    """Write the trace's graph collection to `path` (JSON that Model Explorer opens) and return it."""
    with gc_paused():  # the payload is built, encoded and freed before the collector runs again
        data = _encode_json(_graph_collection(trace, keep_single_child_layers), indent)
    out = Path(path)
    return write_atomic(out, data, error=ModelExplorerWriteError, what="the Model Explorer graph")


def _encode_json(payload: Any, indent: int | None = None) -> bytes:
    """UTF-8 JSON of a payload of plain dicts, lists and strings (msgspec: several times the stdlib's speed)."""
    data = msgspec.json.encode(payload)
    return msgspec.json.format(data, indent=indent) if indent is not None else data


def io_namespaces(trace: Trace) -> dict[str, str]:
    """Model inputs/outputs that share a top-level name with at least IO_GROUP_MIN others (a KV cache's
    tensors): op label -> one namespace, e.g. `cache (64 outputs)`, so they open as one folded layer."""
    runs: dict[tuple[str, str], list[str]] = {}
    for op in trace.ops:
        if op.kind in (INPUT_KIND, OUTPUT_KIND) and "." in op.io_path:
            runs.setdefault((op.kind, op.io_path.split(".", 1)[0]), []).append(op.label)
    out: dict[str, str] = {}
    for (kind, head), labels in runs.items():
        if len(labels) >= IO_GROUP_MIN:
            noun = "outputs" if kind == OUTPUT_KIND else "inputs"
            out.update(dict.fromkeys(labels, f"{head} ({len(labels)} {noun})"))
    return out


def _io_attributes(trace: Trace, io_groups: dict[str, str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for label, ns in io_groups.items():
        op = trace[label]
        head = op.io_path.split(".", 1)[0]
        entry = out.setdefault(ns, {"module": "", "class": "model outputs" if op.kind == OUTPUT_KIND else "model inputs",
                                    "io_path": f"{head}.*", "tensors": "0"})
        entry["tensors"] = str(int(entry["tensors"]) + 1)
    return out


_NUM = tuple(str(i) for i in range(256))  # "0", "1", ...: ids and ordinals without a str() call each


def _num(i: int) -> str:
    return _NUM[i] if 0 <= i < 256 else str(i)


def _node(op: Op, trace: Trace, namespace: str, ladder: str, out_ids: dict[str, str]) -> dict[str, Any]:
    """One node; `out_ids` maps each op label to its output index as text (one lookup per edge)."""
    edges, inputs_meta = [], []
    for i, edge in enumerate(op.parents):
        source = edge.source
        slot = _num(i)
        edges.append({"sourceNodeId": source, "sourceNodeOutputId": out_ids[source], "targetNodeInputId": slot})
        inputs_meta.append({"id": slot, "attrs": [{"key": "__tensor_tag", "value": str(edge.position)}]})
    return {
        "id": op.label,
        "label": op.label,
        "namespace": namespace,
        "subgraphIds": [],
        "attrs": _node_attrs(op, trace, ladder),
        "incomingEdges": edges,
        "outputsMetadata": [{"id": _num(op.output_index), "attrs": _output_attrs(op)}],
        "inputsMetadata": inputs_meta,
    }


def _kv(key: str, value: Any) -> dict[str, str]:
    return {"key": key, "value": str(value)}


def _node_attrs(op: Op, trace: Trace, ladder: str) -> list[dict[str, str]]:
    scope = trace.modules.get(op.module)
    attrs = [  # dict literals rather than `_kv` calls: this runs once per op
        {"key": "kind", "value": op.kind},
        {"key": "function", "value": op.func},
        {"key": "module", "value": op.module_address or "(root)"},
        {"key": "module_class", "value": scope.class_name if scope else trace.model_class},
        {"key": "op_index", "value": str(op.index)},
    ]
    if op.num_outputs > 1:
        attrs.append(_kv("output", f"{op.output_index} of {op.num_outputs} (call {op.func_call_id})"))
    if op.params:
        attrs.append(_kv("parameters", ", ".join(op.params)))
    if op.buffer_writes:
        attrs.append(_kv("buffer_writes", ", ".join(op.buffer_writes)))
    if op.inplace:
        attrs.append(_kv("inplace", "true"))
    if op.io_path:
        attrs.append(_kv("io_path", op.io_path))
    if op.source is not None:
        attrs.append(_kv("source", op.source))
    attrs.append({"key": "claim_state", "value": ladder})
    if op.rank is not None or op.layout is not None or op.collective is not None:  # a sharded model's op (issue 16)
        attrs += distributed_attrs(op)
    return attrs


def _output_attrs(op: Op) -> list[dict[str, str]]:
    attrs = [{"key": "tensor_name", "value": op.label}]
    out = op.out
    if out is not None:
        attrs += [
            {"key": "tensor_shape", "value": _shape_text(out.dtype, out.shape)},
            {"key": "dtype", "value": out.dtype},
            {"key": "device", "value": out.device},
        ]
    return attrs


@lru_cache(maxsize=4096)  # a big graph repeats a few (dtype, shape) pairs
def _shape_text(dtype: str, shape: tuple) -> str:
    """`float32[2, 4]`."""
    return f"{dtype}[{', '.join(str(d) for d in shape)}]"


def _graph_attributes(trace: Trace) -> dict[str, str]:
    totals = trace_totals(trace)
    return {
        "model_class": trace.model_class,
        "ladder_state": trace.ladder_state,
        "structure_only": str(trace.structure_only).lower(),
        "ops": str(len(trace.ops)),
        "edges": str(trace.num_edges),
        "modules": str(len(trace.modules)),
        "parameters": str(trace.param_count()),
        "flops_estimate": str(totals["flops_estimate"]),
        "activation_bytes_estimate": str(totals["activation_bytes_estimate"]),
        "param_bytes": str(totals["param_bytes"]),
    }


class _Layers:
    """Namespaces of the ops and the attributes of each module layer they form."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.layer: dict[str, tuple[str, int]] = {}  # namespace -> (module address, call)
        self._cache: dict[tuple, str] = {}

    def namespace(self, op: Op) -> str:
        if not op.module:
            return ""
        key = (op.module, op.module_stack)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._build(op)
        return found

    def _build(self, op: Op) -> str:
        calls = dict(op.module_stack)
        parts = op.module.split(".")
        names = []
        for depth in range(1, len(parts) + 1):
            address = ".".join(parts[:depth])
            call = calls.get(address, 0)
            name = f"{parts[depth - 1]}:{call}" if call else parts[depth - 1]
            scope = self.trace.modules.get(address)
            names.append(f"{name} ({scope.class_name})" if scope else name)  # the layer reads `0 (GPT2Block)`
            self.layer.setdefault("/".join(names), (address, call))
        return "/".join(names)

    def display_name(self, namespace: str) -> str:
        """A module layer's name as a node label, `lm_head: Linear` (`shared:1: Linear` for a later call);
        "" for a namespace that is no module layer."""
        if namespace not in self.layer:
            return ""
        address, call = self.layer[namespace]
        scope = self.trace.modules.get(address)
        name = address.rsplit(".", 1)[-1] + (f":{call}" if call else "")
        return f"{name}: {scope.class_name}" if scope else name

    def attributes(self) -> dict[str, dict[str, str]]:
        counts = module_param_counts(self.trace, at_every_alias=True)
        out = {}
        for namespace, (address, call) in sorted(self.layer.items()):
            scope = self.trace.modules.get(address)
            out[namespace] = {
                "module": f"{address}:{call}" if call else address,
                "class": scope.class_name if scope else "(not a module)",
                "parameters": str(counts.get(address, 0)),
                "calls": str(len(scope.calls)) if scope else "0",
            }
        return out


# -- the node-data overlay ------------------------------------------------------------------
def node_data(trace: Trace, metric: str) -> dict[str, Any]:
    """One overlay as Model Explorer node data (`{graph id: GraphNodeData}`), keyed by node id.

    Metrics: `parameters`, `output_bytes`, `flops`, `claim_state` and, for traces with saved values,
    the activation statistics; values come from `exporters.overlays` (one implementation for every view).
    """
    if metric not in NODE_DATA_METRICS and metric not in overlays.available(trace):
        raise overlays.OverlayOptionsError(f"unknown node-data metric {metric!r}; pick one of {overlays.available(trace)}",
                                           site="exporters.model_explorer.node_data", overlay=metric)
    ov = overlays.build_overlay(trace, metric)
    if ov.categorical:
        results = {label: {"value": v, "bgColor": overlays.CLAIM_COLORS.get(v, overlays.NO_VALUE)}
                   for label, v in ov.ops.items()}
        gradient = []
    else:
        results = {label: {"value": v} for label, v in ov.ops.items()}
        gradient = [dict(g) for g in _GRADIENT]
    # Every field the vendor's GraphNodeData writes, with its defaults spelled out.
    data = {
        "results": results, "name": ov.title, "thresholds": [], "gradient": gradient,
        "hideInAggregatedStatsTable": False, "hideInChildrenStatsTable": False,
        "showExpandedSummaryOnGroupNode": False, "showLabelCountColumnsInChildrenStatsTable": False,
    }
    return {graph_id(trace): data}


def export_node_data(trace: Trace, path: str | Path, metrics: tuple[str, ...] = NODE_DATA_METRICS) -> dict[str, Path]:
    """Write one node-data file per metric next to the graph file `path`: `<stem>.<metric>.nodedata.json`."""
    base = Path(path)
    written = {}
    for metric in metrics:
        out = base.with_name(f"{base.stem}.{metric}.nodedata.json")
        write_atomic(out, json.dumps(node_data(trace, metric)).encode("utf-8"), error=ModelExplorerWriteError,
                     what="the Model Explorer node data")
        written[metric] = out
    return written
