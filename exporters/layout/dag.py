"""Layered top-to-bottom placement of one small DAG of sized boxes (no nesting here).

Items arrive in execution order, which is a topological order of the forward edges (an edge to an
earlier item is a back edge and does not shape the layers). Steps: longest-path layering with
sources pulled down next to their first consumer, dummy points on edges that skip layers,
barycentric ordering sweeps, and order-preserving x placement that pulls each box under the mean
of its parents (overlaps resolved by merging blocks, so a row is centred, not pushed right).
"""
from __future__ import annotations

from dataclasses import dataclass

H_GAP = 16.0
V_GAP = 26.0
DUMMY_W = 6.0
SWEEPS = 4


@dataclass(slots=True)
class DagPlacement:
    """Top-left corners of the boxes, the route of each skipping edge, and the drawing's extent."""

    x0: list[float]
    y0: list[float]
    layer: list[int]
    bends: dict[tuple[int, int], list[tuple[float, float]]]  # (u, v) -> points through skipped layers
    width: float
    height: float


def place_dag(sizes: list[tuple[float, float]], edges: list[tuple[int, int]]) -> DagPlacement:
    """Place boxes `sizes[i] = (w, h)` for forward edges `(u, v)`, u < v; coordinates start at 0."""
    n = len(sizes)
    if n == 0:
        return DagPlacement([], [], [], {}, 0.0, 0.0)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        preds[v].append(u)
        succs[u].append(v)
    layer = _layers(n, preds, succs)
    rows, nodes_w, chains = _rows_with_dummies(n, sizes, layer, edges)
    node_preds, node_succs = _node_links(len(nodes_w), n, preds, succs, chains)
    _order(rows, node_preds, node_succs)
    xs = _x_place(rows, nodes_w, node_preds)
    heights = [max((sizes[i][1] for i in row if i < n), default=0.0) for row in rows]
    tops, y = [], 0.0
    for h in heights:
        tops.append(y)
        y += h + V_GAP
    x0 = [xs[i] - sizes[i][0] / 2 for i in range(n)]
    y0 = [tops[layer[i]] for i in range(n)]
    bends = {
        key: [pt for d, lay in chain for pt in ((xs[d], tops[lay] - V_GAP / 2), (xs[d], tops[lay] + heights[lay]))]
        for key, chain in chains.items()
    }
    left = min(min(x0), min((xs[i] - DUMMY_W / 2 for i in range(n, len(xs))), default=0.0))
    if left != 0.0:
        x0 = [x - left for x in x0]
        bends = {k: [(px - left, py) for px, py in pts] for k, pts in bends.items()}
        xs = [x - left for x in xs]
    right = max(max(x0[i] + sizes[i][0] for i in range(n)), max((xs[i] + DUMMY_W / 2 for i in range(n, len(xs))), default=0.0))
    return DagPlacement(x0, y0, layer, bends, right, y - V_GAP)


def _layers(n: int, preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    layer = [0] * n
    for v in range(n):
        if preds[v]:
            layer[v] = max(layer[u] for u in preds[v]) + 1
    for v in range(n - 1, -1, -1):  # a source sits just above its nearest consumer
        if not preds[v] and succs[v]:
            layer[v] = max(0, min(layer[w] for w in succs[v]) - 1)
    return layer


def _rows_with_dummies(n, sizes, layer, edges):
    rows: list[list[int]] = [[] for _ in range(max(layer) + 1)]
    for v in range(n):
        rows[layer[v]].append(v)
    widths = [w for w, _ in sizes]
    chains: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for u, v in edges:
        if layer[v] - layer[u] > 1 and (u, v) not in chains:
            chain = []
            for lay in range(layer[u] + 1, layer[v]):
                d = len(widths)
                widths.append(DUMMY_W)
                rows[lay].append(d)
                chain.append((d, lay))
            chains[(u, v)] = chain
    return rows, widths, chains


def _node_links(total, n, preds, succs, chains):
    """Neighbour lists over boxes and dummies, a skipping edge replaced by its dummy chain."""
    up: list[list[int]] = [[] for _ in range(total)]
    down: list[list[int]] = [[] for _ in range(total)]
    for v in range(n):
        for u in preds[v]:
            chain = chains.get((u, v))
            hops = [u, *(d for d, _ in chain), v] if chain else [u, v]
            for a, b in zip(hops, hops[1:]):
                down[a].append(b)
                up[b].append(a)
    return up, down


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


def _x_place(rows, widths, up) -> list[float]:
    """Centre x of every box and dummy: under the mean of its parents, rows kept in order."""
    xs = [0.0] * len(widths)
    for row in rows:
        desired = []
        cursor = 0.0
        for v in row:
            ns = up[v]
            want = sum(xs[u] for u in ns) / len(ns) if ns else cursor + widths[v] / 2
            desired.append(want)
            cursor = want + widths[v] / 2 + H_GAP
        for v, x in zip(row, _resolve(desired, [widths[v] for v in row])):
            xs[v] = x
    return xs


def _resolve(desired: list[float], widths: list[float]) -> list[float]:
    """Closest order-preserving non-overlapping centres (overlapping runs merged, each at its mean)."""
    blocks: list[list[float]] = []  # [start, width, sum of (wanted start - offset), count, first index]
    for i, (want, w) in enumerate(zip(desired, widths)):
        block = [want - w / 2, w, want - w / 2, 1.0, float(i)]
        while blocks and blocks[-1][0] + blocks[-1][1] + H_GAP > block[0]:
            prev = blocks.pop()
            offset = prev[1] + H_GAP
            total = prev[2] + block[2] - offset * block[3]
            count = prev[3] + block[3]
            block = [total / count, offset + block[1], total, count, prev[4]]
        blocks.append(block)
    result = [0.0] * len(desired)
    for b in blocks:
        x = b[0]
        first = int(b[4])
        for i in range(first, first + int(b[3])):
            result[i] = x + widths[i] / 2
            x += widths[i] + H_GAP
    return result
