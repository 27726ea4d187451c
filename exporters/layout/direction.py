"""Left-to-right layouts: a top-to-bottom layout of boxes with width and height swapped, turned on its side.

`LayoutEngine(trace, transposed=True)` lays out every box with its width and height exchanged;
`transpose` then swaps x and y everywhere, so boxes get their real size back, rows become columns,
edges leave a box's right side and enter the next one's left side, and a frame's header strip runs
down its left side (drawn rotated). Routing, crossings and label room carry over unchanged: the
transposed picture is the same geometry mirrored across the diagonal.
"""
from __future__ import annotations

from dataclasses import replace

from .result import Layout, LayoutEdge

DIRECTIONS = ("TB", "LR")


def transpose(layout: Layout) -> Layout:
    """`layout` mirrored across its diagonal (x <-> y); made by a `transposed` engine, it reads left to right."""
    nodes = tuple(replace(n, x=n.y, y=n.x, width=n.height, height=n.width) for n in layout.nodes)
    frames = tuple(replace(f, x0=f.y0, y0=f.x0, x1=f.y1, y1=f.x1) for f in layout.frames)
    edges = tuple(LayoutEdge(e.source, e.target, tuple((y, x) for x, y in e.points), e.back_edge) for e in layout.edges)
    return Layout(nodes, frames, edges, layout.height, layout.width, layout.expanded, layout.visible,
                  hidden=layout.hidden, groups=layout.groups)


__all__ = ["DIRECTIONS", "transpose"]
