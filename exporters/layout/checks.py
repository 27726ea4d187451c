"""Geometric audits of a layout: edges that cross boxes or frame headers, labels wider than their box."""
from __future__ import annotations

from dataclasses import dataclass

from .result import Layout
from .style import FRAME_HEADER, header_width, text_width

INSET = 0.5  # touching a box's outline is not crossing it
CELL = 160.0


@dataclass(frozen=True, slots=True)
class Crossing:
    """An edge segment running through the inside of a box (or a frame's header) it does not connect."""

    source: str
    target: str
    obstacle: str  # a node id, or "header:<frame address>"


def edge_crossings(layout: Layout) -> list[Crossing]:
    """Every (edge, box) pair where a segment of the edge enters the box's interior; frames' header
    strips count as boxes, so an edge running over a header is a crossing too."""
    obstacles: list[tuple[str, tuple[float, float, float, float]]] = [(n.id, n.bounds) for n in layout.nodes]
    obstacles += [(f"header:{f.address}" + (f"#{f.call}" if f.call else ""),
                   (f.x0, f.y0, min(f.x1, f.x0 + header_width(f.label)), f.y0 + FRAME_HEADER)) for f in layout.frames]
    grid: dict[tuple[int, int], list[int]] = {}
    for k, (_, b) in enumerate(obstacles):
        for cell in _cells(b):
            grid.setdefault(cell, []).append(k)
    found: list[Crossing] = []
    for e in layout.edges:
        hit: set[int] = set()
        for (xa, ya), (xb, yb) in zip(e.points, e.points[1:]):
            seg = (min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb))
            for cell in _cells(seg):
                for k in grid.get(cell, ()):
                    name, b = obstacles[k]
                    if k not in hit and name not in (e.source, e.target) and _segment_hits(xa, ya, xb, yb, b):
                        hit.add(k)
                        found.append(Crossing(e.source, e.target, name))
    return found


def label_overflows(layout: Layout) -> list[str]:
    """Ids of boxes, and `frame:<address>` of frames, whose label is wider than the space it has."""
    bad = [n.id for n in layout.nodes if text_width(n.label) > n.width - 2.0]
    bad += [f"frame:{f.address}" for f in layout.frames if header_width(f.label) > f.x1 - f.x0 + 1e-6]
    return bad


def _cells(b: tuple[float, float, float, float]):
    for i in range(int(b[0] // CELL), int(b[2] // CELL) + 1):
        for j in range(int(b[1] // CELL), int(b[3] // CELL) + 1):
            yield (i, j)


def _segment_hits(xa: float, ya: float, xb: float, yb: float, box: tuple[float, float, float, float]) -> bool:
    """Does the segment pass through the box shrunk by INSET (Liang-Barsky clipping)?"""
    x0, y0, x1, y1 = box[0] + INSET, box[1] + INSET, box[2] - INSET, box[3] - INSET
    if x0 >= x1 or y0 >= y1:
        return False
    t0, t1 = 0.0, 1.0
    dx, dy = xb - xa, yb - ya
    for p, q in ((-dx, xa - x0), (dx, x1 - xa), (-dy, ya - y0), (dy, y1 - ya)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
        if t0 > t1:
            return False
    return t1 - t0 > 1e-9
