"""Orthogonal edge routes through the gaps between rows, with one track per wire in each gap.

A route is its start (the source box's bottom centre), a list of moves `(channel, x)` ("go down to
this gap, then across to x"), and the target's top. Every gap is a channel; the horizontal pieces
in one channel get distinct heights (tracks), except pieces of one wire: the branches of a fan out
of one box, or the feeders of one box arriving at one x, share a track and read as one line.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

from .result import LayoutEdge

MIN_RUN = 0.01  # a move shorter than this is straight down, not a horizontal piece
TRACK_SEP = 3.0  # pieces closer than this along x go on different tracks


@dataclass(slots=True)
class Route:
    """One edge before tracks are assigned."""

    source: str
    target: str
    start: tuple[float, float]
    moves: list[tuple[object, float]]
    end_y: float
    back_edge: bool = False


def assign_tracks(routes: list[Route], band: Callable[[object], tuple[float, float]]) -> list[LayoutEdge]:
    """Polylines for `routes`; `band(channel)` gives a channel's (top, bottom) y."""
    parent: dict[tuple, tuple] = {}

    def find(k: tuple) -> tuple:
        root = parent.get(k)
        if root is None:
            parent[k] = k
            return k
        while root != k:
            k, root = root, parent[root]
        return root

    pieces: list[tuple[tuple, float, float]] = []  # (from-key, x from, x to) per horizontal piece
    for r in routes:
        x = r.start[0]
        for channel, nx in r.moves:
            if nx - x > MIN_RUN or x - nx > MIN_RUN:
                key = ("from", channel, r.source, x)
                a, b = find(key), find(("to", channel, r.target, nx))
                if a != b:
                    parent[a] = b
                pieces.append((key, x, nx))
            x = nx
    spans: dict[tuple, list[float]] = {}  # wire (its root key) -> [lo, hi], in first-seen order
    wire_of: list[tuple] = []
    for key, xa, xb in pieces:
        wire = find(key)
        wire_of.append(wire)
        lo, hi = (xa, xb) if xa < xb else (xb, xa)
        span = spans.get(wire)
        if span is None:
            spans[wire] = [lo, hi]
        else:
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
    by_channel: dict[object, list[tuple]] = {}
    for wire in spans:
        by_channel.setdefault(wire[1], []).append(wire)
    height: dict[tuple, float] = {}
    for channel, wires in by_channel.items():
        wires.sort(key=lambda w: spans[w])  # stable: ties keep first-seen order
        free: list[tuple[float, int]] = []  # (right end of its last piece, track), the earliest-free first
        track_of = []
        for w in wires:
            lo, hi = spans[w]
            if free and free[0][0] + TRACK_SEP <= lo:
                t = heapq.heapreplace(free, (hi, free[0][1]))[1]
            else:
                t = len(free)
                heapq.heappush(free, (hi, t))
            track_of.append(t)
        top, bottom = band(channel)
        step = (bottom - top) / (len(free) + 1)
        for w, t in zip(wires, track_of):
            height[w] = top + step * (t + 1)
    edges: list[LayoutEdge] = []
    k = 0
    for r in routes:
        pts = [r.start]
        x = r.start[0]
        for _channel, nx in r.moves:
            if nx - x > MIN_RUN or x - nx > MIN_RUN:
                y = height[wire_of[k]]
                k += 1
                pts += [(x, y), (nx, y)]
            x = nx
        pts.append((x, r.end_y))
        edges.append(LayoutEdge(r.source, r.target, tuple(pts), r.back_edge))
    return edges
