"""Checks on a Model Explorer payload: a structural validator and a rebuild through the vendor's dataclasses."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ModelExplorerPayloadError, ModelExplorerUnavailableError

_MAX_PROBLEMS = 20


@dataclass(frozen=True)
class PayloadReport:
    """What a valid payload holds: graphs, nodes, edges and layers (module namespaces)."""

    graphs: int
    nodes: int
    edges: int
    layers: int


def validate_payload(payload: Any) -> PayloadReport:
    """Check ids, edges, output/input ids and namespaces; raise ModelExplorerPayloadError listing the problems."""
    problems: list[str] = []
    graphs = _graphs_of(payload, problems)
    seen_graphs: set[str] = set()
    nodes = edges = layers = 0
    for g_index, graph in enumerate(graphs):
        gid = graph.get("id") if isinstance(graph, dict) else None
        if not isinstance(gid, str) or not gid:
            problems.append(f"graph #{g_index} has no string id")
            continue
        if gid in seen_graphs:
            problems.append(f"graph id {gid!r} repeats")
        seen_graphs.add(gid)
        n, e, layer_set = _check_graph(gid, graph, problems)
        nodes, edges, layers = nodes + n, edges + e, layers + len(layer_set)
    if problems:
        shown = problems[:_MAX_PROBLEMS]
        more = f" (+{len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
        raise ModelExplorerPayloadError(
            f"{len(problems)} problem(s) in the Model Explorer payload: {shown[0]}{more}",
            site=shown[0], problems=shown, count=len(problems),
        )
    return PayloadReport(graphs=len(graphs), nodes=nodes, edges=edges, layers=layers)


def _graphs_of(payload: Any, problems: list[str]) -> list[dict]:
    if isinstance(payload, list):
        graphs = payload
    elif isinstance(payload, dict):
        if not isinstance(payload.get("label"), str):
            problems.append("the collection has no string label")
        graphs = payload.get("graphs")
    else:
        problems.append(f"the payload is a {type(payload).__name__}, not a collection or a list of graphs")
        return []
    if not isinstance(graphs, list) or not graphs:
        problems.append("the payload holds no graphs")
        return []
    return graphs


def _check_graph(gid: str, graph: dict, problems: list[str]) -> tuple[int, int, set[str]]:
    nodes = graph.get("nodes")
    if not isinstance(nodes, list):
        problems.append(f"graph {gid!r}: nodes is not a list")
        return 0, 0, set()
    outputs: dict[str, set[str]] = {}
    for i, node in enumerate(nodes):
        nid = node.get("id") if isinstance(node, dict) else None
        if not isinstance(nid, str) or not nid:
            problems.append(f"graph {gid!r}: node #{i} has no string id")
            continue
        if nid in outputs:
            problems.append(f"graph {gid!r}: node id {nid!r} repeats")
        outputs[nid] = _ids(node.get("outputsMetadata", []), f"{gid}/{nid} outputsMetadata", problems)
        if not isinstance(node.get("label"), str):
            problems.append(f"graph {gid!r}: node {nid!r} has no string label")
        _check_kv_list(node.get("attrs", []), f"{gid}/{nid} attrs", problems)
    layer_set: set[str] = set()
    edges = 0
    for node in nodes:
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            continue
        nid = node["id"]
        ns = node.get("namespace", "")
        if not _namespace_ok(ns):
            problems.append(f"graph {gid!r}: node {nid!r} has a malformed namespace {ns!r}")
        elif ns:
            parts = ns.split("/")
            layer_set.update("/".join(parts[:d]) for d in range(1, len(parts) + 1))
        inputs = _ids(node.get("inputsMetadata", []), f"{gid}/{nid} inputsMetadata", problems)
        edges += _check_edges(gid, nid, node.get("incomingEdges", []), outputs, inputs, problems)
    _check_groups(gid, graph.get("groupNodeAttributes"), layer_set, problems)
    return len(nodes), edges, layer_set


def _check_edges(gid, nid, edges, outputs, inputs, problems) -> int:
    if not isinstance(edges, list):
        problems.append(f"graph {gid!r}: node {nid!r} incomingEdges is not a list")
        return 0
    targets: set[str] = set()
    for edge in edges:
        src = edge.get("sourceNodeId") if isinstance(edge, dict) else None
        if src not in outputs:
            problems.append(f"graph {gid!r}: edge into {nid!r} comes from missing node {src!r}")
            continue
        out_id = edge.get("sourceNodeOutputId", "0")
        if outputs[src] and out_id not in outputs[src]:
            problems.append(f"graph {gid!r}: edge {src!r}->{nid!r} leaves missing output {out_id!r}")
        in_id = edge.get("targetNodeInputId", "0")
        if in_id in targets:
            problems.append(f"graph {gid!r}: two edges enter input {in_id!r} of {nid!r}")
        targets.add(in_id)
        if inputs and in_id not in inputs:
            problems.append(f"graph {gid!r}: edge {src!r}->{nid!r} enters undeclared input {in_id!r}")
    return len(edges)


def _ids(items: Any, where: str, problems: list[str]) -> set[str]:
    if not isinstance(items, list):
        problems.append(f"{where} is not a list")
        return set()
    ids: set[str] = set()
    for item in items:
        iid = item.get("id") if isinstance(item, dict) else None
        if not isinstance(iid, str):
            problems.append(f"{where}: an item has no string id")
            continue
        if iid in ids:
            problems.append(f"{where}: id {iid!r} repeats")
        ids.add(iid)
        _check_kv_list(item.get("attrs", []), where, problems)
    return ids


def _check_kv_list(attrs: Any, where: str, problems: list[str]) -> None:
    if not isinstance(attrs, list):
        problems.append(f"{where} is not a list")
        return
    for kv in attrs:
        if not (isinstance(kv, dict) and isinstance(kv.get("key"), str) and "value" in kv):
            problems.append(f"{where}: {kv!r} is not a {{key, value}} pair")


def _namespace_ok(ns: Any) -> bool:
    if not isinstance(ns, str):
        return False
    return ns == "" or all(part.strip() for part in ns.split("/"))


def _check_groups(gid: str, groups: Any, layers: set[str], problems: list[str]) -> None:
    if groups is None:
        return
    if not isinstance(groups, dict):
        problems.append(f"graph {gid!r}: groupNodeAttributes is not a mapping")
        return
    for ns, attrs in groups.items():
        if ns != "" and ns not in layers:
            problems.append(f"graph {gid!r}: groupNodeAttributes names {ns!r}, which no node lies in")
        if not isinstance(attrs, dict) or not all(isinstance(v, str) for v in attrs.values()):
            problems.append(f"graph {gid!r}: groupNodeAttributes[{ns!r}] is not a str -> str mapping")


# -- the vendor rebuild ---------------------------------------------------------------------------
def rebuild_with_graph_builder(payload: dict[str, Any]) -> dict[str, Any]:
    """Rebuild the payload from `model_explorer.graph_builder` dataclasses and serialize it back.

    Unknown keys fail (the dataclasses refuse them); the result equals the payload when
    every field is in the vendor's schema with the vendor's defaults spelled out.
    """
    from dataclasses import asdict

    from model_explorer.utils import remove_none

    return remove_none(asdict(vendor_collection(payload)))


def vendor_collection(payload: dict[str, Any]) -> Any:
    """The payload as the vendor's `graph_builder.GraphCollection` (what an adapter extension returns)."""
    try:
        from model_explorer import graph_builder as gb
    except ImportError as exc:  # pragma: no cover - the package is a dependency here
        raise ModelExplorerUnavailableError(f"model_explorer is not importable: {exc}", site="vendor_collection") from exc

    def kvs(items):
        return [gb.KeyValue(key=kv["key"], value=kv["value"]) for kv in items]

    def meta(items):
        return [gb.MetadataItem(id=m["id"], attrs=kvs(m.get("attrs", []))) for m in items]

    def node(n):
        fields = dict(n)
        fields["attrs"] = kvs(n.get("attrs", []))
        fields["incomingEdges"] = [gb.IncomingEdge(**e) for e in n.get("incomingEdges", [])]
        fields["outputsMetadata"] = meta(n.get("outputsMetadata", []))
        fields["inputsMetadata"] = meta(n.get("inputsMetadata", []))
        if "style" in n:
            fields["style"] = gb.GraphNodeStyle(**n["style"])
        if "config" in n:
            fields["config"] = gb.GraphNodeConfig(**n["config"])
        return gb.GraphNode(**fields)

    def graph(g):
        fields = dict(g)
        fields["nodes"] = [node(n) for n in g.get("nodes", [])]
        if "layoutConfigs" in g:
            fields["layoutConfigs"] = gb.LayoutConfigs(**g["layoutConfigs"])
        if "groupNodeConfigs" in g:
            fields["groupNodeConfigs"] = [gb.GroupNodeConfig(**c) for c in g["groupNodeConfigs"]]
        return gb.Graph(**fields)

    extra = {k: v for k, v in payload.items() if k not in ("label", "graphs")}
    return gb.GraphCollection(label=payload["label"], graphs=[graph(g) for g in payload["graphs"]], **extra)


# -- names after Model Explorer's single-child flattening --------------------------------------------
def collapsed_layers(nodes: list[dict]) -> dict[str, list[str]]:
    """What Model Explorer's layout does without `keepLayersWithASingleChild`: a layer whose only child is
    one op node is removed and the node moves up, again and again (its parent may then hold only that
    node). Returns node id -> the layers it stands for, outermost first (nodes that stand for none left out)."""
    children: dict[str, list[str]] = {}
    for n in nodes:
        ns = n.get("namespace") or ""
        if not ns:
            continue
        children.setdefault(ns, []).append("node:" + n["id"])
        parts = ns.split("/")
        for depth in range(len(parts) - 1, 0, -1):
            parent, child = "/".join(parts[:depth]), "/".join(parts[:depth + 1])
            kids = children.setdefault(parent, [])
            if "layer:" + child not in kids:
                kids.append("layer:" + child)
    stands: dict[str, list[str]] = {}
    for ns in sorted(children, key=lambda s: -s.count("/")):  # innermost first: a parent sees its collapsed child
        kids = children[ns]
        if len(kids) != 1 or not kids[0].startswith("node:"):
            continue
        node = kids[0]
        stands.setdefault(node[5:], []).insert(0, ns)
        if "/" in ns:
            parent = children[ns.rsplit("/", 1)[0]]
            parent[parent.index("layer:" + ns)] = node
    return stands


def layer_names_lost(payload: dict[str, Any]) -> list[str]:
    """Module layers whose name and class nobody shows once Model Explorer has laid the graph out: a
    layer that survives shows them as its own name (`lm_head (Linear)`); a collapsed one must be named
    in its node's label (`lm_head: Linear`). [] when every module keeps its name."""
    lost = []
    for graph in payload["graphs"]:
        if (graph.get("layoutConfigs") or {}).get("keepLayersWithASingleChild"):
            continue
        labels = {n["id"]: n.get("label", "") for n in graph["nodes"]}
        groups = graph.get("groupNodeAttributes") or {}
        for node_id, layers in collapsed_layers(graph["nodes"]).items():
            for ns in layers:
                attrs = groups.get(ns) or {}
                if not attrs.get("module"):
                    continue  # not a module (a group of model outputs)
                name = attrs["module"].rsplit(".", 1)[-1]
                if f"{name}: {attrs.get('class', '')}" not in labels[node_id]:
                    lost.append(f"{attrs['module']} ({attrs.get('class', '')}) collapses into {node_id!r} "
                                f"labelled {labels[node_id]!r}")
    return lost
