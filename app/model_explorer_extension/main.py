"""The extension's classes: open a saved trace in Model Explorer itself, overlays included.

    model-explorer --extensions=app.model_explorer_extension path/to/model.trace.zip

`TraceAdapter` converts a saved trace (its folder, its `trace.json`, or the app's `.trace.zip`)
into the same graph collection the exporter writes (module nesting, class-named layers, grouped
cache outputs). `TraceOverlays` is a node-data provider: in Model Explorer's side panel it colours
the graph by any overlay the trace offers (parameters, output bytes, FLOPs, claim state and, for
traces with values, activation statistics). Loading goes through `tracer.load` (validated,
fail-closed, no pickle), with the app's zip caps; a refusal reaches the viewer as its message.
"""
from __future__ import annotations

from typing import Any

from model_explorer import Adapter, AdapterMetadata, NodeDataProvider
from model_explorer.config_editor import DropDownConfigEditor, OptionItem
from model_explorer.node_data_builder import GradientItem, GraphNodeData, NodeDataResult
from model_explorer.node_data_provider import (GetConfigEditorsResult, NodeDataProviderFilter,
                                               NodeDataProviderMetadata, NodeDataProviderResult)

ADAPTER_ID = "torchlens_explore_trace"
OVERLAYS_ID = "torchlens_explore_overlays"
METRIC_KEY = "metric"


def _load(model_path: str) -> Any:
    from ..sources import open_trace_file

    return open_trace_file(model_path).trace


class TraceAdapter(Adapter):
    """Converts a trace saved by torchlens-explore into Model Explorer graphs."""

    metadata = AdapterMetadata(
        id=ADAPTER_ID,
        name="torchlens-explore trace",
        description="A PyTorch trace saved by torchlens-explore (trace folder, trace.json or .trace.zip), "
                    "with module nesting and claim state.",
        fileExts=["zip"],
    )

    def convert(self, model_path: str, settings: dict) -> dict:
        from exporters.model_explorer.check import vendor_collection
        from exporters.model_explorer.payload import to_graph_collection

        return {"graphCollections": [vendor_collection(to_graph_collection(_load(model_path)))]}


class TraceOverlays(NodeDataProvider):
    """Colours a torchlens-explore graph by one of the trace's overlays."""

    metadata = NodeDataProviderMetadata(
        id=OVERLAYS_ID,
        name="torchlens-explore overlays",
        description="Colour the graph by parameters, output bytes, FLOPs, claim state or activation statistics.",
        icon="palette",
        filter=NodeDataProviderFilter(adapterIds=[ADAPTER_ID]),
    )

    def get_config_editors(self, provider_id: str) -> GetConfigEditorsResult:
        from exporters import overlays

        names = list(overlays.BUILTIN)
        return GetConfigEditorsResult(configEditors=[DropDownConfigEditor(
            id=METRIC_KEY, label="Overlay", defaultValue=names[0],
            options=[OptionItem(value=n, label=n.replace("_", " ")) for n in names],
            help="Activation statistics need a trace saved with values.")])

    def run(self, provider_id: str, model_path: str, graph_id: str, config_values: dict,
            graph: Any = None) -> NodeDataProviderResult:
        from exporters.model_explorer.payload import node_data
        from tracer.errors import TracerError

        try:
            data = node_data(_load(model_path), str(config_values.get(METRIC_KEY, "parameters")))
        except TracerError as exc:  # typed refusals (a bad file, an overlay this trace lacks) read as text
            return NodeDataProviderResult(error=str(exc))
        (one,) = data.values()
        return NodeDataProviderResult(result=GraphNodeData(
            name=one["name"],
            results={k: NodeDataResult(**v) for k, v in one["results"].items()},
            gradient=[GradientItem(**g) for g in one["gradient"]],
        ))
