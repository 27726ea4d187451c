"""What the self-contained HTML page carries: ops, modules, precomputed layouts and overlays as plain JSON.

Views: the default expansion; for every module that draws more than one item, the default plus
that module and its ancestors expanded (one open path at a time); and the default with each of its
expanded modules collapsed. Expanding or collapsing in the page always lands on one of these.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping

from tracer.ir import Trace
from tracer.module_tree import module_param_counts

from .. import overlays
from ..layout import Layout, LayoutEngine
from ..layout.groups import CANVAS
from ..layout.style import HEADER_CHAR_W, edge_colors, fill_color, ladder_caption, op_family, shape_text
from ..layout.style import EDGE, BACK_EDGE, BROADCAST_EDGE
from .. import search_terms

EDGE_COLORS = (EDGE, BACK_EDGE, BROADCAST_EDGE)


def page_data(trace: Trace, *, overlay: Mapping[str, float] | None = None, title: str | None = None) -> dict[str, Any]:
    """Everything the page draws, as JSON-ready data (every string is data: the page sets it as text)."""
    engine = LayoutEngine(trace)
    labels = [op.label for op in trace.ops]
    index = {label: i for i, label in enumerate(labels)}
    covered: dict[str, list[list[int]]] = {}
    drawn = [_view(engine.layout(exp), index, trace, covered) for exp in view_expansions(engine)]
    return {
        "title": (title or trace.model_class) + (" [REFUTED]" if trace.ladder_state == "REFUTED" else ""),  # in <title> too
        "model_class": trace.model_class,
        "ladder": trace.ladder_state,
        "banner": ladder_caption(trace.ladder_state),
        "counts": {"ops": len(trace.ops), "modules": len(trace.modules), "params": trace.param_count(),
                   "edges": trace.num_edges},
        "ops": _ops(trace, index),
        "modules": _modules(trace),
        "views": drawn,
        "where": _where(drawn, len(index)),
        "overlays": _overlays(trace, overlay),
        "edge_colors": EDGE_COLORS,
        "header_char_w": HEADER_CHAR_W,  # a frame header's room for its title (page.js slides headers within it)
        "search_aliases": search_terms.page_table(),  # the page's search ranks with the app's alias table
    }


def view_expansions(engine: LayoutEngine) -> list[frozenset[str]]:
    """The expansion states the page offers, default first (see the module docstring)."""
    default = engine.default_expansion()
    parent = engine.tree.parent_of
    seen: dict[frozenset[str], None] = {default: None}
    for key, group in engine.tree.groups.items():
        if key == CANVAS or not key[0] or not (group.children or len(group.ops) > 1) or key[0] in engine.tree.spans:
            continue  # a long forward's spans stay closed: one view each would grow the file with the forward
        chain, a = set(), key[0]
        while a:
            chain.add(a)
            a = parent.get(a, "")
        seen.setdefault(default | chain | {""}, None)
    for d in sorted(default):
        seen.setdefault(frozenset(a for a in default if not _within(a, d)), None)
    return list(seen)


def _within(address: str, outer: str) -> bool:
    return address == outer or (outer == "" or address.startswith(outer + "."))


def _ops(trace: Trace, index: dict[str, int]) -> dict[str, list]:
    cols: dict[str, list] = {k: [] for k in ("label", "kind", "func", "shape", "dtype", "module", "params", "source",
                                             "attrs", "parents", "family", "io")}
    for op in trace.ops:
        cols["label"].append(op.label)
        cols["kind"].append(op.kind)
        cols["func"].append(op.func)
        cols["shape"].append(shape_text(op.out.shape) if op.out is not None else "")
        cols["dtype"].append(op.out.dtype if op.out is not None else "")
        cols["module"].append(op.module)
        cols["params"].append(list(op.params))
        cols["source"].append(str(op.source) if op.source is not None else "")
        cols["attrs"].append({str(k): _plain(v) for k, v in op.attrs.items()})
        cols["parents"].append([[index[e.source], e.position] for e in op.parents if e.source in index])
        cols["family"].append(fill_color("op", op_family(op)))
        cols["io"].append(op.io_path)
    return cols


def _plain(value: Any) -> Any:
    """A JSON-safe rendering of a non-tensor attribute (anything else becomes its repr, cut at 200 chars)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, (list, tuple)) and len(value) <= 32:
        return [_plain(v) for v in value]
    return repr(value)[:200]


def _modules(trace: Trace) -> dict[str, list]:
    counts = module_param_counts(trace)
    return {a: [s.class_name, counts.get(a, 0), len(s.calls), list(s.params)[:50]] for a, s in trace.modules.items()}


def _view(lay: Layout, index: dict[str, int], trace: Trace, covered: dict[str, list[list[int]]]) -> dict[str, Any]:
    """One view's boxes, frames and edges; `covered` caches each box id's op ranges across views (a
    collapsed module or a group of outputs holds the same ops in every view that draws it)."""
    if any(n.id not in covered for n in lay.nodes):
        inside: dict[str, list[int]] = {}
        for label, node_id in lay.visible.items():
            if node_id != label and node_id not in covered:
                inside.setdefault(node_id, []).append(index[label])
        for n in lay.nodes:
            if n.id not in covered:
                covered[n.id] = _ranges(inside.get(n.id, []))
    nodes = []
    for n in lay.nodes:
        fill = fill_color(n.kind, op_family(trace[n.op_label]) if n.kind == "op" and n.op_label else None)
        nodes.append([n.id, n.kind, n.label, _r(n.x), _r(n.y), _r(n.width), _r(n.height), n.module or "", n.repeat,
                      covered[n.id], fill, list(n.members)])
    colors = {c: i for i, c in enumerate(EDGE_COLORS)}
    edges = [[e.source, e.target, orthogonal_points(e.points), colors.get(c, 0)]
             for e, c in zip(lay.edges, edge_colors(lay.edges))]
    frames = [[f.address, f.label, f.depth, _r(f.x0), _r(f.y0), _r(f.x1), _r(f.y1), f.call] for f in lay.frames]
    own = {n.id: index[n.id] for n in lay.nodes if n.kind in ("op", "io") and n.id in index}
    return {"expanded": sorted(lay.expanded), "w": _r(lay.width), "h": _r(lay.height), "nodes": nodes,
            "frames": frames, "edges": edges, "index": own}


def orthogonal_points(points: Iterable[tuple[float, float]]) -> list[int]:
    """An edge's polyline rounded to whole units as `[x0, y0, y1, x1, y2, x2, ...]`: after the start,
    values set y and x in turn (down, across, down, ...), as a layout edge runs; a step across where
    one down is due is written as a zero-length step down first, a repeated point is left out."""
    it = iter(points)
    x, y = next(it)
    x, y = round(x), round(y)
    out = [x, y]
    vertical = True
    for px, py in it:
        px, py = round(px), round(py)
        if vertical:
            if px == x:
                if py != y:
                    out.append(py)
                    y, vertical = py, False
                continue
            if py == y:  # across where down is due: a zero-length step down first
                out += (y, px)
            else:  # a diagonal (never made by routing) becomes an L
                out += (py, px)
            x, y = px, py
        else:
            if py == y:
                if px != x:
                    out.append(px)
                    x, vertical = px, True
                continue
            if px == x:
                out += (x, py)
            else:
                out += (px, py)
            x, y = px, py
    return out


def _r(v: float) -> float:
    r = round(v, 1)
    return int(r) if r == int(r) else r


def _ranges(ids: Iterable[int]) -> list[list[int]]:
    """Sorted integers as [first, last] runs."""
    out: list[list[int]] = []
    for i in sorted(ids):
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def _where(views: list[dict[str, Any]], n_ops: int) -> list[list]:
    """For each op, [view, node id]: a view where it is its own box, else the one drawing it in the innermost module."""
    rank: list[tuple] = [(-1, 0, 0)] * n_ops  # (own box 2 / inside a box 1, module depth, -boxes in the view)
    where: list[list] = [[0, ""]] * n_ops
    for vi, view in enumerate(views):
        size = -len(view["nodes"])
        for n in view["nodes"]:
            if n[1] in ("op", "io") and not n[9]:
                i = view["index"].get(n[0])
                if i is not None and (2, 99, size) > rank[i]:
                    rank[i], where[i] = (2, 99, size), [vi, n[0]]
                continue
            key = (1, n[7].count(".") + 1 if n[7] else 0, size)
            hit = [vi, n[0]]
            for first, last in n[9]:
                for i in range(first, last + 1):
                    if key > rank[i]:
                        rank[i], where[i] = key, hit
    for view in views:
        del view["index"]
    return [list(w) for w in where]


def _overlays(trace: Trace, user: Mapping[str, float] | None) -> list[dict[str, Any]]:
    built = overlays.build_overlays(trace, overlays.available(trace))
    if user:
        built.append(overlays.build_overlay(trace, user))
    out = []
    for ov in built:
        values = [_finite(ov.ops.get(op.label)) for op in trace.ops]
        out.append({"name": ov.name, "title": ov.title, "categorical": ov.categorical, "values": values,
                    "modules": dict(ov.modules)})
    return out


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def to_json(data: dict[str, Any]) -> str:
    """Compact JSON (NaN/inf become strings so the browser's JSON.parse accepts the file)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=str)
