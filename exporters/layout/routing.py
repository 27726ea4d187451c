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
    moves: list[tuple[int, float]]  # (channel number, x)
    end_y: float
    back_edge: bool = False


def assign_tracks(routes: list[Route], band: Callable[[int], tuple[float, float]]) -> list[LayoutEdge]:
    """Polylines for `routes` (channels are numbers); `band(channel)` gives a channel's (top, bottom) y."""
    parent: list[int] = []  # wire -> the wire it was merged into (union-find over wire numbers)
    channel_of: list[int] = []
    lo: list[float] = []  # per wire number: the x extent of the pieces recorded under it
    hi: list[float] = []
    by_from: dict[tuple, int] = {}  # (channel, source, x) -> wire: the branches of one fan
    by_to: dict[tuple, int] = {}  # (channel, target, x) -> wire: the feeders of one box at one x
    laid: list[tuple[list[tuple[int, float, float]], float]] = []  # per route: (wire, x from, x to) pieces, last x

    def root(w: int) -> int:
        while parent[w] != w:
            parent[w] = parent[parent[w]]
            w = parent[w]
        return w

    from_get, to_get = by_from.get, by_to.get
    for r in routes:
        x = r.start[0]
        source, target = r.source, r.target
        pieces: list[tuple[int, float, float]] = []
        for channel, nx in r.moves:
            d = nx - x
            if d > MIN_RUN or d < -MIN_RUN:
                kf, kt = (channel, source, x), (channel, target, nx)
                wf, wt = from_get(kf), to_get(kt)
                if wf is None:
                    if wt is None:
                        w = len(parent)
                        parent.append(w)
                        channel_of.append(channel)
                        lo.append(x)
                        hi.append(x)
                        by_to[kt] = w
                    else:
                        w = wt
                    by_from[kf] = w
                elif wt is None:
                    w = wf
                    by_to[kt] = w
                else:
                    w, other = root(wf), root(wt)
                    if other != w:
                        parent[other] = w
                a, b = (x, nx) if d > 0 else (nx, x)
                if a < lo[w]:
                    lo[w] = a
                if b > hi[w]:
                    hi[w] = b
                pieces.append((w, x, nx))
            x = nx
        laid.append((pieces, x))
    # Merged wires: a wire's extent is its members'; wires are numbered in the order their first piece
    # was met, so a root's first-seen order is that of its lowest member.
    roots = [root(w) for w in range(len(parent))]
    spans: dict[int, list[float]] = {}  # root wire -> [lo, hi], in first-seen order
    for w, r in enumerate(roots):
        span = spans.get(r)
        if span is None:
            spans[r] = [lo[w], hi[w]]
        else:
            if lo[w] < span[0]:
                span[0] = lo[w]
            if hi[w] > span[1]:
                span[1] = hi[w]
    by_channel: dict[int, list[int]] = {}
    for w in spans:
        by_channel.setdefault(channel_of[w], []).append(w)
    height: dict[int, float] = {}
    for channel, wires in by_channel.items():
        top, bottom = band(channel)
        if len(wires) == 1:
            height[wires[0]] = (top + bottom) / 2
            continue
        wires.sort(key=spans.__getitem__)  # stable: ties keep first-seen order
        free: list[tuple[float, int]] = []  # (right end of its last piece, track), the earliest-free first
        track_of = []
        for w in wires:
            lo_w, hi_w = spans[w]
            if free and free[0][0] + TRACK_SEP <= lo_w:
                t = heapq.heapreplace(free, (hi_w, free[0][1]))[1]
            else:
                t = len(free)
                heapq.heappush(free, (hi_w, t))
            track_of.append(t)
        step = (bottom - top) / (len(free) + 1)
        for w, t in zip(wires, track_of):
            height[w] = top + step * (t + 1)
    y_of = [height[r] for r in roots]
    edges: list[LayoutEdge] = []
    for r, (pieces, x) in zip(routes, laid):
        pts = [r.start]
        for w, xa, xb in pieces:
            y = y_of[w]
            pts += ((xa, y), (xb, y))
        pts.append((x, r.end_y))
        edges.append(LayoutEdge(r.source, r.target, tuple(pts), r.back_edge))
    return edges
