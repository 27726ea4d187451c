"""Absolute boxes, frames and routed edges from the engine's cached sub-layouts of one expansion state."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .groups import GroupKey, group_id
from .result import LayoutEdge, LayoutFrame, LayoutNode
from .routing import Route, assign_tracks
from .style import FRAME_HEADER, FRAME_PAD

if TYPE_CHECKING:
    from .engine import LayoutEngine, _Sub

BACK_EDGE_OFFSET = 5.0  # a back edge runs this far right of its group's content, inside the frame's padding


class Assembly:
    """Turns cached relative sub-layouts into absolute nodes, frames and routed edges."""

    def __init__(self, eng: "LayoutEngine") -> None:
        self.eng = eng
        self.nodes: list[LayoutNode] = []
        self.frames: list[LayoutFrame] = []
        self.frame_of: dict[GroupKey, LayoutFrame] = {}
        self.visible: dict[str, str] = {}
        self.where: dict[GroupKey, tuple[_Sub, float, float]] = {}
        self.boxes: dict[str, tuple[float, float, float, float]] = {}
        self.bands: list[tuple[float, float]] = []  # channel number -> (top, bottom) y of a gap
        self.channel0: dict[GroupKey, int] = {}  # placed group -> number of its first gap

    def place(self, sub: "_Sub", key: GroupKey, ox: float, oy: float, depth: int) -> None:
        self.where[key] = (sub, ox, oy)
        self.channel0[key] = self._add_channels(sub, oy)
        eng = self.eng
        for p in sub.placed:
            x0, y0 = ox + p.x0, oy + p.y0
            if p.kind == "frame":
                address, call = p.item
                frame = LayoutFrame(address, eng.module_label(p.item), depth, x0, y0, x0 + p.w, y0 + p.h, call)
                self.frames.append(frame)
                self.frame_of[p.item] = frame
                self.place(p.sub, p.item, x0 + (p.w - p.sub.width) / 2, y0 + FRAME_HEADER, depth + 1)
                continue
            cx, cy = x0 + p.w / 2, y0 + p.h / 2
            if p.kind in ("op", "io"):
                op = eng.trace[p.item]
                node = LayoutNode(p.item, p.kind, eng.op_text(p.item), cx, cy, p.w, p.h, p.item, op.module)
                self.visible[p.item] = node.id
            elif p.kind == "iogroup":
                labels = tuple(p.item)
                node = LayoutNode(
                    f"io:{labels[0]}", "io", eng.io_group_label(list(labels)), cx, cy, p.w, p.h, labels[0], "",
                    repeat=len(labels), members=labels,
                )
                for label in labels:
                    self.visible[label] = node.id
            elif p.kind == "module":
                node = LayoutNode(group_id(p.item), "module", eng.module_label(p.item), cx, cy, p.w, p.h, None, p.item[0])
                self._cover(node.id, [p.item])
            else:
                run = list(p.item)
                node = LayoutNode(
                    "fold:" + group_id(run[0]).removeprefix("mod:"), "folded", eng.fold_label(run), cx, cy, p.w, p.h, None, run[0][0],
                    repeat=len(run), members=tuple(k[0] for k in run),
                )
                self._cover(node.id, run)
            self.nodes.append(node)
            self.boxes[node.id] = (x0, y0, x0 + p.w, y0 + p.h)

    def _cover(self, node_id: str, keys: list[GroupKey]) -> None:
        for k in keys:
            self.visible.update(dict.fromkeys(self.eng.labels_in(k), node_id))

    # -- routing -----------------------------------------------------------------
    def route(self) -> tuple[LayoutEdge, ...]:
        """Orthogonal routes: down a box's own column, across in the gaps between rows, down a
        dummy's column; into a frame through its entry port, out through its exit port."""
        routes: list[Route] = []
        seen: set[tuple[str, str]] = set()
        under = self.eng.edges_under
        # an edge whose lowest common group is not placed lies inside one drawn box: only the others, in order
        drawn = sorted(k for g in self.where for k in under.get(g, ()))
        edges = self.eng.edges
        for k in drawn:
            src, dst, lca, cs, ct, i, out_key, in_key = edges[k]
            s, t = self.visible.get(src), self.visible.get(dst)
            if s is None or t is None or s == t or (s, t) in seen:
                continue
            seen.add((s, t))
            routes.append(self._route(s, t, lca, cs, ct, i, out_key, in_key))
        return tuple(assign_tracks(routes, self.bands.__getitem__))

    def _route(self, s: str, t: str, lca: GroupKey, cs: tuple, ct: tuple, i: int, out_key: object,
               in_key: object) -> Route:
        sb, tb = self.boxes[s], self.boxes[t]
        source_frames, target_frames = self._frames_down(lca, cs, i), self._frames_down(lca, ct, i)
        moves: list[tuple[object, float]] = []
        for k in range(len(source_frames) - 1, -1, -1):  # innermost frame first, out through each exit port
            g = source_frames[k]
            sub, ox, oy = self.where[g]
            port = sub.out_ports[out_key]
            moves += self._hop(g, sub.index[cs[i + k + 1]], port, ox + sub.dag.xs[port])
        target_x = (tb[0] + tb[2]) / 2
        first_x = self._entry_x(target_frames[0], in_key) if target_frames else target_x
        sub, _, _ = self.where[lca]
        a, b = sub.index[cs[i]], sub.index[ct[i]]
        back = a > b
        moves += self._back_hop(lca, a, b, first_x) if back else self._hop(lca, a, b, first_x)
        for k, g in enumerate(target_frames):  # outermost frame first, in through each entry port
            sub, _, _ = self.where[g]
            nxt = self._entry_x(target_frames[k + 1], in_key) if k + 1 < len(target_frames) else target_x
            moves += self._hop(g, sub.in_ports[in_key], sub.index[ct[i + k + 1]], nxt)
        return Route(s, t, ((sb[0] + sb[2]) / 2, sb[3]), moves, tb[1], back)

    def _frames_down(self, lca: GroupKey, chain: tuple, i: int) -> list[GroupKey]:
        """The expanded groups along `chain` below `lca`, outermost first (the drawn node is below them)."""
        frames: list[GroupKey] = []
        parent, j = lca, i
        while j < len(chain) - 1:
            sub = self.where[parent][0]
            if sub.placed[sub.index[chain[j]]].kind != "frame":
                break
            frames.append(chain[j])
            parent, j = chain[j], j + 1
        return frames

    def _entry_x(self, g: GroupKey, key: object) -> float:
        """Where an edge enters frame `g` from above: over its entry port, clear of the header text."""
        sub, ox, _ = self.where[g]
        x = ox + sub.dag.xs[sub.in_ports[key]]
        frame = self.frame_of[g]
        clear = frame.x0 + self.eng.header_width(g) + 3
        return min(clear, frame.x1 - FRAME_PAD / 2) if x < clear else x

    def _hop(self, g: GroupKey, a: int, b: int, x_end: float) -> list[tuple[object, float]]:
        """Moves from DAG node `a` down to node `b` of group `g`: one per gap, via the chain's dummies."""
        sub, ox, _ = self.where[g]
        dag = sub.dag
        la, lb = dag.layer[a], dag.layer[b]
        if lb == la + 1:
            return [(self.channel0[g] + la, x_end)]
        chain = dag.chains[(a, b)]
        base = self.channel0[g]
        return [(base + r, x_end if r == lb - 1 else ox + dag.xs[chain[r - la]]) for r in range(la, lb)]

    def _back_hop(self, g: GroupKey, a: int, b: int, x_end: float) -> list[tuple[object, float]]:
        """A back edge: down to the gap under `a`, out past the group's right side, up to the gap over `b`."""
        sub, ox, _ = self.where[g]
        dag = sub.dag
        base, rows = self.channel0[g], len(dag.tops)
        below = base + dag.layer[a] if dag.layer[a] + 1 < rows else base + rows  # the "under the content" band
        above = base + dag.layer[b] - 1 if dag.layer[b] > 0 else base + rows + 1  # the "over the content" band
        return [(below, ox + sub.width + BACK_EDGE_OFFSET), (above, x_end)]

    def _add_channels(self, sub: "_Sub", oy: float) -> int:
        """Number the gaps of a placed group (then the bands under and over its content); returns the first."""
        first = len(self.bands)
        dag = sub.dag
        self.bands += [(oy + t + h, oy + nxt) for t, h, nxt in zip(dag.tops, dag.heights, dag.tops[1:])]
        self.bands.append((0.0, 0.0))  # the last row has no gap under it: its number is unused
        self.bands.append((oy + sub.height + 1.0, oy + sub.height + FRAME_PAD - 2.0))
        self.bands.append((oy - 5.0, oy - 1.0))
        return first
