"""A sharded model in the explorer (issue 16): the rank selector, collective nodes, placement badges.

A gathered trace (`tracer.distributed.gather`) opens on all its ranks, the collectives joining them;
the selector shows one rank, or the folded view ("x N ranks": one representative per group of
identical ranks). A per-rank or simulated trace shows the rank it is. Collective ops are drawn in
their own colour with a heavy border (a legend entry says so); an op whose output is a DTensor
carries its placement (`Shard(1)`, `Replicate()`, `Partial(sum)`) in the hover's shape, in the
inspector as a badge, and in the Model Explorer export. The graph, inspector and page call the
hooks here; the bytes each collective sends are the "comm_bytes" overlay (`exporters.overlays`).
"""
from __future__ import annotations

import html
import threading
from typing import Any

import panel as pn
import param

from exporters.layout.style import shape_text
from exporters.model_explorer.distributed import mesh_text, placement_badge
from exporters.overlays import format_value
from tracer.distributed import fold, select_ranks
from tracer.module_tree import module_param_counts

from ..state import ExplorerState, session_engine

COLLECTIVE_FILL = "#b39ddb"  # collectives: lavender with a heavy dark-violet border, unlike any op family
COLLECTIVE_LINE = "#4527a0"
COLLECTIVE_LINE_WIDTH = 3.0
PLAIN_LINE = "#555555"  # bokeh_graph's node outline
BADGE_COLORS = {"Shard": "#1565c0", "Replicate": "#2e7d32", "Partial": "#ef6c00"}


def is_sharded(trace: Any) -> bool:
    """Whether `trace` comes from a sharded model (the distributed capture, `gather` and `simulate` all set
    `Provenance.distributed`; only they put ranks, layouts and collectives on ops). O(1): runs on every redraw."""
    return bool(trace.provenance.distributed)


# -- the views a selector offers ------------------------------------------------------------------------
_VIEWS: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(trace) -> (trace, {choice: trace}), built once per trace
_VIEWS_LOCK = threading.Lock()


def rank_views(trace: Any) -> dict[str, Any]:
    """The selector's choices -> the trace each shows: all ranks, the folded view and each rank of a gathered
    trace; the one rank of a per-rank or simulated trace; nothing for an unsharded trace."""
    with _VIEWS_LOCK:
        hit = _VIEWS.get(id(trace))
        if hit is not None and hit[0] is trace:
            return hit[1]
    views = _build_views(trace)
    with _VIEWS_LOCK:
        _VIEWS[id(trace)] = (trace, views)
    return views


def _build_views(trace: Any) -> dict[str, Any]:
    dist = dict(trace.provenance.distributed or {})
    ranks = sorted({op.rank for op in trace.ops if op.rank is not None})
    if ranks:
        views = {f"all {len(ranks)} ranks": trace}
        groups = dist.get("rank_groups") or []
        if groups and len(groups) < len(ranks):
            views["folded: " + ", ".join(g["label"] for g in groups)] = fold(trace)
        views.update({f"rank {r}": select_ranks(trace, {r}) for r in ranks})
        return views
    if not is_sharded(trace):
        return {}
    world, rank = dist.get("world_size"), dist.get("rank", 0)
    if dist.get("simulated"):
        return {f"x {world} ranks (simulated, rank {rank} captured)": trace}
    return {f"rank {rank} of {world}" if world else f"rank {rank}": trace}


def show_view(state: ExplorerState, name: str) -> None:
    """Draw the rank view `name` of the session's trace (the selector's change)."""
    views = rank_views(state.loaded.trace)
    trace = views[name]
    if state.trace is trace:
        return
    state.trace = trace
    state.engine = session_engine(trace)
    state._param_totals = module_param_counts(trace)  # the state's per-module totals, for its inspector rows
    state.param.update(selected="", focused="", centre_on="")
    expanded = frozenset(state.engine.default_expansion()) | collective_frames(trace)
    if expanded == state.expanded:
        state.relayout()
    else:
        state.expanded = expanded
    state.message = f"Showing {name}: {len(trace.ops)} ops."


OPEN_COLLECTIVES_UP_TO = 16  # a view with at most this many collectives opens the modules that hold them


def collective_frames(trace: Any) -> frozenset[str]:
    """The modules (and their ancestors) holding a collective, when there are few enough to open them all."""
    collectives = [op for op in trace.ops if op.collective is not None]
    if not collectives or len(collectives) > OPEN_COLLECTIVES_UP_TO:
        return frozenset()
    modules = {op.module for op in collectives}
    opened = {""}
    for address in modules:
        parts = address.split(".") if address else []
        opened |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return frozenset(a for a in opened if a == "" or a in trace.modules)


def mesh_summary(trace: Any) -> str:
    """One line: backend, world size, meshes and the collectives' bytes (estimates said so)."""
    dist = dict(trace.provenance.distributed or {})
    colls = [op.collective for op in trace.ops if op.collective is not None]
    meshes = "; ".join(f"{' x '.join(m.get('dims') or ['mesh'])} {m.get('shape')}" for m in dist.get("meshes", []))
    estimated = any(c.estimated for c in colls)
    parts = [f"{dist.get('backend', '?')} backend" + (" (simulated)" if dist.get("simulated") else ""),
             f"world {dist.get('world_size', '?')}"]
    if meshes:
        parts.append(f"mesh {meshes}")
    parts.append(f"{len(colls)} collectives, {format_value(sum(c.wire_bytes for c in colls))}B sent"
                 + (" (estimates)" if estimated else ""))
    return " · ".join(parts)


class RankSelector(pn.viewable.Viewer):
    """Which rank the graph shows (a gathered trace: all, folded, or one), and the mesh in one line."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        views = rank_views(self.state.loaded.trace)
        self.select = pn.widgets.Select(options=list(views), value=next(iter(views), None), width=320,
                                        css_classes=["tlx-rank"], disabled=len(views) < 2, visible=bool(views))
        self.summary = pn.pane.HTML(
            f'<div class="tlx-mesh" style="font:12px sans-serif;color:#444">{html.escape(mesh_summary(self.state.trace))}'
            f'</div>' if views else "", visible=bool(views), margin=(0, 5))
        self.select.param.watch(lambda e: show_view(self.state, e.new), "value")
        opened = collective_frames(self.state.trace)
        if opened and not opened <= self.state.expanded:  # the collectives in view from the start
            self.state.expanded = self.state.expanded | opened

    def __panel__(self):
        return pn.Column(self.select, self.summary, margin=0, visible=self.select.visible,
                         css_classes=["tlx-rank-panel"])


# -- the graph: collective nodes and placements ---------------------------------------------------------
def node_note(op: Any) -> str:
    """What the hover adds to an op's shape: its placement and global shape, or its collective and bytes."""
    if op.collective is not None:
        c = op.collective
        return (f"{c.name} over ranks {list(c.group)}, {format_value(c.wire_bytes)}B sent"
                + (" (estimate)" if c.estimated else ""))
    if op.layout is not None:
        return f"{placement_badge(op)} of {shape_text(op.layout.global_shape)}"
    return ""


def decorate_nodes(cols: dict[str, Any], trace: Any) -> None:
    """Add placement notes to the node rows' shapes and style collective nodes (in place; sharded traces only)."""
    if not is_sharded(trace):
        return
    n = len(cols["id"])
    placement, width, line = [""] * n, [1.0] * n, [PLAIN_LINE] * n
    for i, (kind, ident) in enumerate(zip(cols["kind"], cols["id"])):
        if kind not in ("op", "io") or ident not in trace:
            continue
        op = trace[ident]
        note = node_note(op)
        if not note:
            continue
        placement[i] = note
        cols["shape"][i] = f"{cols['shape'][i]} · {note}" if cols["shape"][i] else note
        if op.collective is not None:
            cols["fill"][i] = COLLECTIVE_FILL
            width[i], line[i] = COLLECTIVE_LINE_WIDTH, COLLECTIVE_LINE
    cols["placement"], cols["line_w"], cols["line_c"] = placement, width, line


def attach(graph: Any) -> None:
    """Style a graph view's live figure for a sharded trace: per-node outline columns, placements in the hover."""
    trace = graph.state.trace
    if not is_sharded(trace):
        return
    from bokeh.models import HoverTool

    renderer = graph._sources["nodes"]
    data = dict(renderer.data_source.data)
    data["shape"], data["fill"] = list(data["shape"]), list(data["fill"])
    decorate_nodes(data, trace)
    renderer.data_source.data = data
    renderer.glyph.line_width = {"field": "line_w"}
    renderer.glyph.line_color = {"field": "line_c"}
    for tool in graph.figure.select(type=HoverTool):
        if all(name != "placement" for name, _ in tool.tooltips):
            tool.tooltips = [*tool.tooltips, ("placement", "@placement")]


def legend_extra(trace: Any) -> str:
    """The legend's entries for a sharded trace: collective nodes, and where placements show."""
    if trace is None or not is_sharded(trace):
        return ""
    box = (f'<span style="display:inline-block;width:11px;height:11px;background:{COLLECTIVE_FILL};border:2px solid '
           f'{COLLECTIVE_LINE};vertical-align:-1px;margin-right:3px"></span>')
    return (f'<span class="tlx-legend-item tlx-legend-collective" style="white-space:nowrap;margin-right:8px">{box}'
            f'collective (between ranks)</span> <span class="tlx-legend-item" style="color:#555">placement: hover or '
            f'inspector</span> ')


# -- the inspector ---------------------------------------------------------------------------------------
def inspector_rows(trace: Any, label: str) -> list[tuple[str, str]]:
    """Rank, placement (global and local shape, mesh) and collective rows for op `label`; [] for a plain op."""
    op = trace[label]
    rows: list[tuple[str, str]] = []
    if op.rank is not None:
        rows.append(("rank", str(op.rank)))
    lay = op.layout
    if lay is not None:
        rows += [("placement", placement_badge(op)), ("global shape", str(tuple(lay.global_shape))),
                 ("local shape", str(tuple(lay.local_shape))), ("mesh", mesh_text(op))]
    c = op.collective
    if c is not None:
        est = " (estimate)" if c.estimated else ""
        rows += [("collective", f"{c.name} ({c.api})"), ("group", str(list(c.group))),
                 ("payload bytes", f"{c.payload_bytes:,}{est}"), ("wire bytes", f"{c.wire_bytes:,} (ring){est}")]
        if c.reduce_op:
            rows.append(("reduce op", c.reduce_op))
    return rows


def badge_html(text: str) -> str:
    """Placement text as coloured badges, one per mesh dimension (Shard blue, Replicate green, Partial orange)."""
    out = []
    for part in text.split(", "):
        kind = part.split(":")[-1].split("(")[0]
        colour = BADGE_COLORS.get(kind, "#555")
        out.append(f'<span class="tlx-placement-badge" style="display:inline-block;padding:0 6px;margin-right:4px;'
                   f'border-radius:8px;background:{colour};color:#fff;font-size:12px">{html.escape(part)}</span>')
    return "".join(out)


def inspector_markup(trace: Any, label: str) -> dict[str, str]:
    """The inspector's placement field as badges (empty for an op without a layout)."""
    op = trace[label]
    return {"placement": badge_html(placement_badge(op))} if op.layout is not None else {}
