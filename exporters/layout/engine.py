"""A deterministic, nesting-aware, layered top-to-bottom layout of a Trace.

Coordinates are abstract units (about 1 px at 100 % zoom) and y grows downward. A module in
`expanded` is a frame around its children, every other module one box; with `fold_repeats`,
runs of structurally identical sibling blocks become one "x N" box. Each expanded module's
children are laid out as a small DAG (see `dag`), recursively, and cached by the expansion
state of its subtree, so a click re-lays out only the path from the root to the clicked module.
Edges are routed orthogonally around boxes and frames (see `routing`). The cache belongs to a
`LayoutEngine`, one per owner (an app session, a notebook view): nothing is shared between owners.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from tracer.errors import LayoutModuleUnknownError
from tracer.ir import INPUT_KIND, OUTPUT_KIND, Trace

from .dag import SPACING, DagPlacement, Spacing, place_dag
from .groups import CANVAS, ROOT, GroupKey, GroupTree, group_id
from .result import Layout, LayoutEdge, LayoutFrame, LayoutNode
from .routing import Route, assign_tracks
from .style import FOLDED_H, FRAME_HEADER, FRAME_PAD, MODULE_H, OP_H, box_width, header_width, shape_text

MARGIN = 10.0
IO_FOLD_MIN = 3  # this many consecutive outputs under one name (e.g. a KV cache) draw as one box
BACK_EDGE_OFFSET = 5.0  # a back edge runs this far right of its group's content, inside the frame's padding


# -- internal: one expanded group's placed items -------------------------------------
@dataclass(slots=True)
class _Placed:
    kind: str  # "op" | "io" | "iogroup" | "module" | "folded" | "frame"
    item: object  # op label, group key, or a tuple of group keys (folded) or of op labels (iogroup)
    x0: float
    y0: float
    w: float
    h: float
    sub: "_Sub | None" = None


@dataclass(slots=True)
class _Sub:
    """One expanded group laid out in its own coordinates: items, then entry ports, then exit ports."""

    width: float
    height: float
    placed: list[_Placed]
    index: dict[object, int]  # underlying item (op label / group key) -> position in `placed`
    dag: DagPlacement
    in_ports: dict[object, int]  # port key -> DAG node of the entry port
    out_ports: dict[object, int]  # port key -> DAG node of the exit port


class LayoutEngine:
    """The layout of one trace for one owner (an app session, a notebook view): the group tree, each
    edge's lowest common group, the frames' ports, and a cache of sub-layouts by expansion state."""

    MAX_CACHED = 20_000  # sub-layouts kept before the cache starts over

    def __init__(self, trace: Trace, hidden: Iterable[str] = (), spacing: Spacing = SPACING) -> None:
        self.trace = trace
        self.spacing = spacing  # gaps between boxes and rows (`dag.COMPACT` for print)
        self.hidden = frozenset(hidden)  # op labels left out; an edge through one joins its neighbours
        self.tree = GroupTree(trace, self.hidden)
        self.cache: dict[tuple, _Sub] = {}
        self.lca_edges: dict[GroupKey, list[tuple[object, object]]] = {k: [] for k in self.tree.groups}
        self.edges: list[tuple[str, str, GroupKey, tuple, tuple, int, object, object]] = []
        self.io_head = self._io_heads()
        self._header_w: dict[GroupKey, float] = {}
        self.in_ports: dict[GroupKey, dict[object, list[object]]] = {}
        self.out_ports: dict[GroupKey, dict[object, list[object]]] = {}
        seen: set[tuple[str, str]] = set()
        for source, target in self._data_edges():
            if (source, target) in seen:
                continue
            seen.add((source, target))
            cs, ct = self.tree.chain(source), self.tree.chain(target)
            i = 0
            while cs[i] == ct[i]:
                i += 1
            lca = cs[i - 1] if i else CANVAS
            self.lca_edges[lca].append((cs[i], ct[i]))
            out_key, in_key = self.port_key(ct[i]), self.port_key(cs[i])
            self.edges.append((source, target, lca, cs, ct, i, out_key, in_key))
            for j in range(i, len(cs) - 1):  # frames the edge leaves, innermost last
                _add_port(self.out_ports, cs[j], out_key, cs[j + 1])
            for j in range(i, len(ct) - 1):  # frames it enters
                _add_port(self.in_ports, ct[j], in_key, ct[j + 1])

    def _data_edges(self):
        """(source, target) op pairs to draw; an edge from a hidden op comes from its nearest shown ancestors."""
        shown: dict[str, tuple[str, ...]] = {}

        def sources(label: str) -> tuple[str, ...]:
            if label not in self.hidden:
                return (label,) if label in self.tree.path_of else ()
            hit = shown.get(label)
            if hit is None:
                shown[label] = ()  # a cycle guard; the IR is acyclic
                found: dict[str, None] = {}
                for e in self.trace[label].parents:
                    found.update(dict.fromkeys(sources(e.source)))
                hit = shown[label] = tuple(found)
            return hit

        for op in self.trace.ops:
            if op.label in self.hidden:
                continue
            for e in op.parents:
                for source in sources(e.source):
                    yield source, op.label

    def layout(self, expanded: Iterable[str] | None = None, *, fold_repeats: bool = False, fold_min: int = 2) -> Layout:
        """The layout with the modules in `expanded` drawn as frames (None: `default_expansion`)."""
        exp = self.default_expansion() if expanded is None else frozenset(expanded)
        unknown = sorted(a for a in exp if a and a not in self.trace.modules)
        if unknown:
            raise LayoutModuleUnknownError(
                f"cannot expand {len(unknown)} address(es) that are not modules of this trace: {unknown[:5]}",
                site="compute_layout(expanded=...)", unknown=unknown,
            )
        if len(self.cache) > self.MAX_CACHED:
            self.cache.clear()
        canvas = self.sub(CANVAS, exp, fold_repeats, fold_min)
        asm = _Assembly(self)
        asm.place(canvas, CANVAS, MARGIN, MARGIN, 0)
        edges = asm.route()
        return Layout(
            tuple(asm.nodes), tuple(asm.frames), edges,
            canvas.width + 2 * MARGIN, canvas.height + 2 * MARGIN, exp, asm.visible, groups=self.tree,
            hidden=self.hidden,
        )

    def default_expansion(self) -> frozenset[str]:
        """Expand containers down to the outermost repeated blocks (see `default_expansion`)."""
        return _default_expansion(self.trace, self.tree)

    def header_width(self, key: GroupKey) -> float:
        """Width of a frame's header label (cached: routing asks once per edge entering the frame)."""
        w = self._header_w.get(key)
        if w is None:
            w = self._header_w[key] = header_width(self.module_label(key))
        return w

    def port_key(self, item: object) -> object:
        """Edges to or from one outside item share a port (a run of model outputs counts as one item)."""
        return self.io_head.get(item, item) if isinstance(item, str) else item

    def _io_heads(self) -> dict[str, str]:
        items = self.tree.items(CANVAS)
        heads: dict[str, str] = {}
        i = 0
        while i < len(items):
            run = self._io_run(items, i) if isinstance(items[i], str) else [items[i]]
            if len(run) >= IO_FOLD_MIN:
                heads.update((label, run[0]) for label in run)
            i += len(run)
        return heads

    # -- per-group layout --------------------------------------------------------
    def sub(self, key: GroupKey, expanded: frozenset[str], fold: bool, fold_min: int) -> _Sub:
        g = self.tree.groups[key]
        ck = (key, expanded & g.subtree, fold, fold_min)
        hit = self.cache.get(ck)
        if hit is None:
            hit = self.cache[ck] = self._layout_group(key, expanded, fold, fold_min)
        return hit

    def _layout_group(self, key: GroupKey, expanded: frozenset[str], fold: bool, fold_min: int) -> _Sub:
        placed: list[_Placed] = []
        index: dict[object, int] = {}
        items = self.tree.items(key)
        i = 0
        while i < len(items):
            item = items[i]
            if isinstance(item, str):
                run = self._io_run(items, i)
                for label in run:
                    index[label] = len(placed)
                if len(run) >= IO_FOLD_MIN:
                    text = self.io_group_label(run)
                    placed.append(_Placed("iogroup", tuple(run), 0, 0, box_width(text), OP_H))
                else:
                    placed.append(self._op_item(item))
                    run = [item]
                i += len(run)
                continue
            run = self._fold_run(items, i, expanded) if fold else [item]
            if len(run) >= max(fold_min, 2):
                label = self.fold_label(run)
                for member in run:
                    index[member] = len(placed)
                placed.append(_Placed("folded", tuple(run), 0, 0, box_width(label, 24), FOLDED_H))
                i += len(run)
                continue
            index[item] = len(placed)
            if item[0] in expanded:
                child = self.sub(item, expanded, fold, fold_min)
                w = max(child.width, self.header_width(item)) + 2 * FRAME_PAD
                placed.append(_Placed("frame", item, 0, 0, w, child.height + FRAME_HEADER + FRAME_PAD, child))
            else:
                placed.append(_Placed("module", item, 0, 0, box_width(self.module_label(item), 20), MODULE_H))
            i += 1
        pairs = {(index[a], index[b]) for a, b in self.lca_edges[key] if index[a] < index[b]}
        sizes = [(p.w, p.h) for p in placed]
        in_ports = self._ports(self.in_ports.get(key, {}), index, sizes, pairs, entering=True)
        out_ports = self._ports(self.out_ports.get(key, {}), index, sizes, pairs, entering=False)
        dag = place_dag(sizes, sorted(pairs), frozenset(in_ports.values()), frozenset(out_ports.values()), self.spacing)
        for p, x, y in zip(placed, dag.x0, dag.y0):
            p.x0, p.y0 = x, y
        return _Sub(dag.width, dag.height, placed, index, dag, in_ports, out_ports)

    def _ports(self, wanted: dict, index: dict, sizes: list, pairs: set, entering: bool) -> dict[object, int]:
        ports: dict[object, int] = {}
        for port_key, inner in wanted.items():
            node = ports[port_key] = len(sizes)
            sizes.append((self.spacing.dummy_w, 0.0))
            for item in inner:
                pairs.add((node, index[item]) if entering else (index[item], node))
        return ports

    def _fold_run(self, items: list, start: int, expanded: frozenset[str]) -> list[GroupKey]:
        first = items[start]
        sig = self.tree.groups[first].signature
        run = []
        for item in items[start:]:
            if isinstance(item, str) or item[0] in expanded or self.tree.groups[item].signature != sig:
                break
            run.append(item)
        return run

    def _io_run(self, items: list, start: int) -> list[str]:
        """Consecutive model outputs (or inputs) under one top-level name, e.g. every `cache.*` tensor."""
        first = self.trace[items[start]]
        if first.kind not in (INPUT_KIND, OUTPUT_KIND):
            return [items[start]]
        head = _io_head(first.io_path)
        run = []
        for item in items[start:]:
            op = self.trace[item] if isinstance(item, str) else None
            if op is None or op.kind != first.kind or _io_head(op.io_path) != head:
                break
            run.append(item)
        return run if head else [items[start]]

    def io_group_label(self, run: list[str]) -> str:
        first = self.trace[run[0]]
        noun = "outputs" if first.kind == OUTPUT_KIND else "inputs"
        return f"{_io_head(first.io_path)}: {len(run)} {noun}"

    def _op_item(self, label: str) -> _Placed:
        op = self.trace[label]
        kind = "io" if op.kind in (INPUT_KIND, OUTPUT_KIND) else "op"
        return _Placed(kind, label, 0, 0, box_width(self.op_text(label)), OP_H)

    # -- text ---------------------------------------------------------------
    def op_text(self, label: str) -> str:
        op = self.trace[label]
        head = op.label if op.kind in (INPUT_KIND, OUTPUT_KIND) else op.kind
        shape = shape_text(op.out.shape) if op.out is not None else ""
        return f"{head} {shape}".strip()

    def module_label(self, key: GroupKey) -> str:
        address, call = key
        cls = self.tree.groups[key].class_name
        if not address:
            return cls
        name = address.rsplit(".", 1)[-1] + (f"#{call}" if call else "")
        return f"{name}: {cls}"

    def fold_label(self, run: list[GroupKey]) -> str:
        first, last = run[0][0], run[-1][0]
        cls = self.tree.groups[run[0]].class_name
        head, _, a = first.rpartition(".")
        _, _, b = last.rpartition(".")
        prefix = head.rsplit(".", 1)[-1] + "." if head else ""
        return f"{prefix}{a}-{b}: {cls} x{len(run)}"


def _io_head(io_path: str) -> str:
    return io_path.split(".", 1)[0] if "." in io_path else ""


def _add_port(ports: dict, frame: GroupKey, key: object, inner: object) -> None:
    inner_items = ports.setdefault(frame, {}).setdefault(key, [])
    if inner not in inner_items:
        inner_items.append(inner)


def group_tree(trace: Trace) -> GroupTree:
    """The module-call hierarchy a layout of `trace` is built on (built afresh: an engine keeps its own)."""
    return GroupTree(trace)


def compute_layout(
    trace: Trace, expanded: Iterable[str] = ("",), *, fold_repeats: bool = False, fold_min: int = 2,
    engine: LayoutEngine | None = None,
) -> Layout:
    """Lay out `trace` with the modules in `expanded` drawn as frames and all others as boxes; pass
    the caller's `engine` to reuse its cached sub-layouts (one made for another trace is not used)."""
    if engine is None or engine.trace is not trace:
        engine = LayoutEngine(trace)
    return engine.layout(expanded, fold_repeats=fold_repeats, fold_min=fold_min)


class _Assembly:
    """Turns cached relative sub-layouts into absolute nodes, frames and routed edges."""

    def __init__(self, eng: LayoutEngine) -> None:
        self.eng = eng
        self.nodes: list[LayoutNode] = []
        self.frames: list[LayoutFrame] = []
        self.frame_of: dict[GroupKey, LayoutFrame] = {}
        self.visible: dict[str, str] = {}
        self.where: dict[GroupKey, tuple[_Sub, float, float]] = {}
        self.boxes: dict[str, tuple[float, float, float, float]] = {}
        self.bands: list[tuple[float, float]] = []  # channel number -> (top, bottom) y of a gap
        self.channel0: dict[GroupKey, int] = {}  # placed group -> number of its first gap

    def place(self, sub: _Sub, key: GroupKey, ox: float, oy: float, depth: int) -> None:
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
                    f"fold:{run[0][0]}", "folded", eng.fold_label(run), cx, cy, p.w, p.h, None, run[0][0],
                    repeat=len(run), members=tuple(k[0] for k in run),
                )
                self._cover(node.id, run)
            self.nodes.append(node)
            self.boxes[node.id] = (x0, y0, x0 + p.w, y0 + p.h)

    def _cover(self, node_id: str, keys: list[GroupKey]) -> None:
        for k in keys:
            for op in self.eng.tree.groups[k].all_ops:
                self.visible[op.label] = node_id

    # -- routing -----------------------------------------------------------------
    def route(self) -> tuple[LayoutEdge, ...]:
        """Orthogonal routes: down a box's own column, across in the gaps between rows, down a
        dummy's column; into a frame through its entry port, out through its exit port."""
        routes: list[Route] = []
        seen: set[tuple[str, str]] = set()
        for src, dst, lca, cs, ct, i, out_key, in_key in self.eng.edges:
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

    def _add_channels(self, sub: _Sub, oy: float) -> int:
        """Number the gaps of a placed group (then the bands under and over its content); returns the first."""
        first = len(self.bands)
        dag = sub.dag
        self.bands += [(oy + t + h, oy + nxt) for t, h, nxt in zip(dag.tops, dag.heights, dag.tops[1:])]
        self.bands.append((0.0, 0.0))  # the last row has no gap under it: its number is unused
        self.bands.append((oy + sub.height + 1.0, oy + sub.height + FRAME_PAD - 2.0))
        self.bands.append((oy - 5.0, oy - 1.0))
        return first


def default_expansion(trace: Trace, engine: LayoutEngine | None = None) -> frozenset[str]:
    """Expand containers down to the outermost repeated blocks (root, `model`, `model.layers` for a Llama)."""
    return _default_expansion(trace, engine.tree if engine is not None and engine.trace is trace else GroupTree(trace))


def _default_expansion(trace: Trace, tree: GroupTree) -> frozenset[str]:
    present = tree.addresses() | {""}
    scopes = trace.modules
    repeated: list[str] = []
    for scope in scopes.values():
        kids = [c for c in scope.children if c in present and c in scopes and scopes[c].children]
        classes = [scopes[c].class_name for c in kids]
        repeated += [c for c in kids if classes.count(scopes[c].class_name) >= 2]
    out: set[str] = {""}
    for addr in repeated:
        chain, a = [], tree.parent_of.get(addr)
        while a is not None:
            chain.append(a)
            a = tree.parent_of.get(a)
        if any(c in repeated for c in chain):
            continue  # nested inside an outer repeated block
        out.update(chain)
    if len(out) == 1:  # nothing repeats: open single-child wrappers below the root
        key = ROOT
        while key in tree.groups and not tree.groups[key].ops and len(tree.groups[key].children) == 1:
            key = tree.groups[key].children[0]
            out.add(key[0])
    return frozenset(out)


def toggle(expanded: frozenset[str], address: str) -> frozenset[str]:
    """Expand `address` if it is collapsed, else collapse it (its descendants' state is kept)."""
    return expanded - {address} if address in expanded else expanded | {address}
