"""The app's Model Explorer hand-off (written in the worker process) equals the Python API's files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporters import model_explorer as me
from exporters import overlays

pytestmark = pytest.mark.slow


def _python_api(trace, folder: Path) -> tuple[dict, dict[str, dict]]:
    graph = me.export(trace, folder / "py.json")
    data = me.export_node_data(trace, graph, tuple(overlays.available(trace)))
    return json.loads(graph.read_text()), {m: json.loads(p.read_text()) for m, p in data.items()}


def _metric(path: Path) -> str:
    return path.name.split(".")[-3]  # <stem>.<metric>.nodedata.json


@pytest.mark.parametrize("which", ["gpt2_loaded", "default_loaded"])
def test_app_handoff_matches_the_python_api(which, request, tmp_path):
    from app.state import ExplorerState
    from app.views.export import model_explorer_isolated

    state = ExplorerState(request.getfixturevalue(which))
    trace = state.trace
    graph_path, data_paths = model_explorer_isolated(state, tmp_path / "app.json")
    app_graph = json.loads(graph_path.read_text())
    app_data = {_metric(p): json.loads(p.read_text()) for p in data_paths}
    py_graph, py_data = _python_api(trace, tmp_path)

    assert app_graph == py_graph
    assert app_data == py_data
    # every overlay the trace offers is handed over, the four built-in ones at least
    assert set(app_data) == set(overlays.available(trace)) >= set(me.NODE_DATA_METRICS)
    graph = app_graph["graphs"][0]
    ids = {n["id"] for n in graph["nodes"]}
    for metric, data in app_data.items():
        assert set(data) == {graph["id"]} and set(data[graph["id"]]["results"]) <= ids, metric
    # layers carry their module's class; outputs sharing a name (a KV cache) lie in one layer
    layers = graph["groupNodeAttributes"]
    modules = [(ns, attrs) for ns, attrs in layers.items() if ns and attrs.get("module")]
    assert modules and all(a["class"] == trace.modules[a["module"].split(":")[0]].class_name for _, a in modules)
    assert all(ns.endswith(f" ({a['class']})") for ns, a in modules)  # each layer is named with its class
    outputs = [n for n in graph["nodes"] if n["attrs"][0]["value"] == "output"]
    cache = [n for n in outputs if n["namespace"].startswith("cache (")]
    if which == "default_loaded":  # the 8B: 32 layers x (key, value)
        assert len(cache) == 64 and {n["namespace"] for n in cache} == {"cache (64 outputs)"}
        assert [trace[n["id"]].io_path for n in outputs if not n["namespace"]] == ["logits"]


def test_app_figure_export_draws_the_current_view(gpt2_loaded, tmp_path):
    """The Export panel's SVG (written in the worker) has the current view's boxes, frames and edges, placed as on screen."""
    import xml.etree.ElementTree as ET

    from app.state import ExplorerState
    from app.views.export import export_isolated

    state = ExplorerState(gpt2_loaded)
    state.expand_to("transformer.h.0.attn", include_self=True)
    state.relayout()
    view = state.layout
    assert "transformer.h.0.attn" in view.expanded and any(n.label.startswith("unsqueeze") for n in view.nodes)
    root = ET.parse(export_isolated(state, tmp_path / "view.svg", "svg")).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    nodes = {g.get("data-id"): g.find(f"{ns}rect") for g in root.iter(f"{ns}g") if g.get("class") == "node"}
    assert set(nodes) == {n.id for n in view.nodes}
    for n in view.nodes:
        assert float(nodes[n.id].get("x")) == pytest.approx(n.x - n.width / 2, abs=0.06), n.id
        assert float(nodes[n.id].get("y")) == pytest.approx(n.y - n.height / 2, abs=0.06), n.id
    frames = [g.get("data-address") for g in root.iter(f"{ns}g") if g.get("class") == "frame"]
    assert frames == [f.address for f in view.frames]
    assert len([p for p in root.iter(f"{ns}polyline") if p.get("class") == "edge"]) == len(view.edges)
