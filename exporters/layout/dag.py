"""Layered top-to-bottom placement of one small DAG of sized boxes (no nesting here).

Items arrive in execution order, which is a topological order of the forward edges (an edge to an
earlier item is a back edge and does not shape the layers). Steps: longest-path layering with
sources pulled down next to their first consumer, port rows (zero-height points where edges enter
at the top or leave at the bottom of a frame), dummy points on edges that skip layers (shared by all
edges of one fan, so a fan is one trunk), barycentric ordering sweeps, and order-preserving x
placement that pulls each box under the mean of its parents (overlaps resolved by merging blocks).

Every row is a horizontal band; boxes of a row start at its top and never share x, so the column
under a box down to the band's bottom is free, as is the gap between two bands: routes run
vertically in those columns and in the dummies' columns, and horizontally in the gaps only.
"""
from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True, slots=True)
class Spacing:
    """Gaps between boxes of a row, between rows, and beside a row of ports; a dummy's width."""

    h_gap: float = 16.0
    v_gap: float = 26.0
    port_gap: float = 14.0  # the gap under a row of entry ports and above a row of exit ports
    dummy_w: float = 6.0


SPACING = Spacing()  # on screen
COMPACT = Spacing(h_gap=12.0, v_gap=16.0, port_gap=9.0, dummy_w=4.0)  # in print
DUMMY_W = SPACING.dummy_w
SWEEPS = 4
BOX_WEIGHT = 50.0  # how much more a box's wish counts than a dummy's when a row is packed


@dataclass(slots=True)
class DagPlacement:
    """Top-left corners of the boxes, every node's centre x (dummies too), row bands and edge chains."""

    x0: list[float]
    y0: list[float]
    layer: list[int]
    xs: list[float]  # centre x of boxes, ports and dummies
    tops: list[float]  # top of each row's band
    heights: list[float]  # height of each row's band
    chains: dict[tuple[int, int], list[int]]  # (u, v) -> dummy node per skipped row
    width: float
    height: float

    def gap(self, row: int) -> tuple[float, float]:
        """The empty band below `row` (between it and the next row)."""
        return self.tops[row] + self.heights[row], self.tops[row + 1]


@dataclass(frozen=True, slots=True)
class DagShape:
    """The size-independent part of a placement: layers, ordered rows (boxes, ports, dummies), dummy
    chains and neighbour lists. Equal for every group with the same item count, edges and ports, so
    one computed for a block serves its identical siblings and every size change of its items."""

    n: int
    top: frozenset[int]
    bottom: frozenset[int]
    layer: tuple[int, ...]
    rows: tuple[tuple[int, ...], ...]
    chains: dict[tuple[int, int], list[int]]
    up: list[list[int]]
    down: list[list[int]]
    total: int  # boxes, ports and dummies


def dag_shape(n: int, edges: list[tuple[int, int]], top: frozenset[int] = frozenset(),
              bottom: frozenset[int] = frozenset()) -> DagShape:
    """Layers, dummy chains and the crossing-reducing row order of `n` items with forward `edges`."""
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        if u in top or v in bottom:
            continue
        preds[v].append(u)
        succs[u].append(v)
    layer = _layers(n, preds, succs, top | bottom)
    shift = 1 if top else 0
    last = max((layer[i] for i in range(n) if i not in top and i not in bottom), default=-1) + shift
    for i in range(n):
        layer[i] = 0 if i in top else last + 1 if i in bottom else layer[i] + shift
    all_preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        all_preds[v].append(u)
    rows, total, chains = _rows_with_dummies(n, layer, edges)
    node_up, node_down = _node_links(total, n, all_preds, chains)
    _order(rows, node_up, node_down)
    return DagShape(n, top, bottom, tuple(layer), tuple(tuple(r) for r in rows), chains, node_up, node_down, total)


def place_dag(sizes: list[tuple[float, float]], edges: list[tuple[int, int]],
              top: frozenset[int] = frozenset(), bottom: frozenset[int] = frozenset(),
              spacing: Spacing = SPACING, shape: DagShape | None = None) -> DagPlacement:
    """Place boxes `sizes[i] = (w, h)` for forward edges `(u, v)`; `top`/`bottom` are entry and exit
    ports pinned to the first and last row (edges port -> box and box -> port); coordinates start at 0.
    `shape`, when given, is `dag_shape` of the same count, edges and ports (computed here otherwise)."""
    n = len(sizes)
    if n == 0:
        return DagPlacement([], [], [], [], [], [], {}, 0.0, 0.0)
    if shape is None:
        shape = dag_shape(n, edges, top, bottom)
    rows, node_up, node_down, layer = shape.rows, shape.up, shape.down, shape.layer
    nodes_w = [w for w, _ in sizes] + [spacing.dummy_w] * (shape.total - n)
    boxes = [i < n and i not in top and i not in bottom for i in range(len(nodes_w))]
    xs = _x_place(rows, nodes_w, node_up, boxes, spacing.h_gap)
    if top:  # entry ports sit over the boxes they feed
        row = rows[0]
        want = [sum(xs[w] for w in node_down[v]) / len(node_down[v]) if node_down[v] else xs[v] for v in row]
        for v, x in zip(row, _resolve(want, [nodes_w[v] for v in row], spacing.h_gap)):
            xs[v] = x
    heights = [max((sizes[i][1] for i in row if i < n), default=0.0) for row in rows]
    last_row = len(rows) - 1
    tops = [0.0]
    for r in range(last_row):
        port_gap = (r == 0 and top) or (r + 1 == last_row and bottom)
        tops.append(tops[r] + heights[r] + (spacing.port_gap if port_gap else spacing.v_gap))
    x0 = [xs[i] - sizes[i][0] / 2 for i in range(n)]
    y0 = [tops[layer[i]] for i in range(n)]
    left = min(xs[i] - nodes_w[i] / 2 for i in range(len(xs)))
    if left != 0.0:
        x0 = [x - left for x in x0]
        xs = [x - left for x in xs]
    right = max(xs[i] + nodes_w[i] / 2 for i in range(len(xs)))
    return DagPlacement(x0, y0, list(layer), xs, tops, heights, shape.chains, right, tops[-1] + heights[-1])


def _layers(n: int, preds: list[list[int]], succs: list[list[int]], ports: frozenset[int]) -> list[int]:
    layer = [0] * n
    for v in range(n):
        if preds[v]:
            layer[v] = max(layer[u] for u in preds[v]) + 1
    for v in range(n - 1, -1, -1):  # a source sits just above its nearest consumer
        if v not in ports and not preds[v] and succs[v]:
            layer[v] = max(0, min(layer[w] for w in succs[v]) - 1)
    return layer


def _rows_with_dummies(n, layer, edges):
    """Rows of box indices plus dummies (numbered from `n` on), and the node count; a fan's skipping
    edges share one dummy per row (a trunk)."""
    rows: list[list[int]] = [[] for _ in range(max(layer) + 1)]
    for v in range(n):
        rows[layer[v]].append(v)
    total = n
    long = sorted({(u, v) for u, v in edges if layer[v] - layer[u] > 1})
    fan_out: dict[int, int] = {}
    fan_in: dict[int, int] = {}
    for u, v in long:
        fan_out[u] = fan_out.get(u, 0) + 1
        fan_in[v] = fan_in.get(v, 0) + 1
    trunks: dict[tuple, dict[int, int]] = {}
    chains: dict[tuple[int, int], list[int]] = {}
    for u, v in long:
        key = ("out", u) if fan_out[u] >= 2 else ("in", v) if fan_in[v] >= 2 else ("edge", u, v)
        trunk = trunks.setdefault(key, {})
        chain = []
        for lay in range(layer[u] + 1, layer[v]):
            d = trunk.get(lay)
            if d is None:
                d = trunk[lay] = total
                total += 1
                rows[lay].append(d)
            chain.append(d)
        chains[(u, v)] = chain
    return rows, total, chains


def _node_links(total, n, preds, chains):
    """Neighbour lists over boxes and dummies, a skipping edge replaced by its dummy chain."""
    up: list[set[int]] = [set() for _ in range(total)]
    down: list[set[int]] = [set() for _ in range(total)]
    for v in range(n):
        for u in preds[v]:
            chain = chains.get((u, v))
            hops = [u, *chain, v] if chain else [u, v]
            for a, b in zip(hops, hops[1:]):
                down[a].add(b)
                up[b].add(a)
    return [sorted(s) for s in up], [sorted(s) for s in down]


def _order(rows, up, down) -> None:
    pos: dict[int, float] = {}
    for row in rows:
        for i, v in enumerate(row):
            pos[v] = i
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        seq = range(1, len(rows)) if downward else range(len(rows) - 2, -1, -1)
        for lay in seq:
            row = rows[lay]
            links = up if downward else down

            def key(v: int, row_i: dict = {v: i for i, v in enumerate(row)}) -> float:
                ns = links[v]
                return sum(pos[u] for u in ns) / len(ns) if ns else float(row_i[v])

            row.sort(key=key)
            for i, v in enumerate(row):
                pos[v] = i


def _x_place(rows, widths, up, boxes, gap) -> list[float]:
    """Centre x of every box and dummy: under the mean of its parent boxes (of its dummies and
    ports when it has no parent box, so a fan's trunk never drags a chain sideways), rows in order."""
    xs = [0.0] * len(widths)
    for row in rows:
        desired = []
        cursor = 0.0
        for v in row:
            ns = [u for u in up[v] if boxes[u]] if boxes[v] else []
            ns = ns or up[v]
            want = sum(xs[u] for u in ns) / len(ns) if ns else cursor + widths[v] / 2
            desired.append(want)
            cursor = want + widths[v] / 2 + gap
        weights = [BOX_WEIGHT if boxes[v] else 1.0 for v in row]
        for v, x in zip(row, _resolve(desired, [widths[v] for v in row], gap, weights)):
            xs[v] = x
    return xs


def _resolve(desired: list[float], widths: list[float], gap: float, weights: list[float] | None = None) -> list[float]:
    """Closest order-preserving non-overlapping centres: overlapping runs merge into one block at the
    weighted mean of what its members want (a box outweighs a dummy, so trunks step aside)."""
    weights = weights or [1.0] * len(desired)
    blocks: list[list[float]] = []  # [start, width, weighted sum of (wanted start - offset), weight, first, count]
    for i, (want, w) in enumerate(zip(desired, widths)):
        block = [want - w / 2, w, (want - w / 2) * weights[i], weights[i], float(i), 1.0]
        while blocks and blocks[-1][0] + blocks[-1][1] + gap > block[0]:
            prev = blocks.pop()
            offset = prev[1] + gap
            total = prev[2] + block[2] - offset * block[3]
            weight = prev[3] + block[3]
            block = [total / weight, offset + block[1], total, weight, prev[4], prev[5] + block[5]]
        blocks.append(block)
    result = [0.0] * len(desired)
    for b in blocks:
        x = b[0]
        first = int(b[4])
        for i in range(first, first + int(b[5])):
            result[i] = x + widths[i] / 2
            x += widths[i] + gap
    return result
