"""A deterministic, nesting-aware, layered top-to-bottom layout of a Trace.

Coordinates are abstract units (about 1 px at 100 % zoom) and y grows downward. A module in
`expanded` is a frame around its children, every other module one box; with `fold_repeats`,
runs of structurally identical sibling blocks become one "x N" box. Each expanded module's
children are laid out as a small DAG (see layout_dag), recursively, and cached by the expansion
state of its subtree, so a click re-lays out only the path from the root to the clicked module.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..errors import LayoutModuleUnknownError
from tracer.ir import INPUT_KIND, OUTPUT_KIND, Trace

from .dag import V_GAP, place_dag
from .groups import CANVAS, ROOT, GroupKey, GroupTree, group_id
from .style import FOLDED_H, FRAME_HEADER, FRAME_PAD, MODULE_H, OP_H, shape_text, text_width

MARGIN = 10.0
IO_FOLD_MIN = 3  # this many consecutive outputs under one name (e.g. a KV cache) draw as one box
BACK_EDGE_OFFSET = 14.0


@dataclass(frozen=True, slots=True)
class LayoutNode:
    """A drawn box: an op, a model input/output, a collapsed module or a folded run of blocks."""

    id: str
    kind: str  # "op" | "io" | "module" | "folded"
    label: str
    x: float
    y: float
    width: float
    height: float
    op_label: str | None
    module: str | None
    repeat: int = 1
    members: tuple[str, ...] = ()

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return (self.x - self.width / 2, self.y - self.height / 2, self.x + self.width / 2, self.y + self.height / 2)


@dataclass(frozen=True, slots=True)
class LayoutFrame:
    """An expanded module drawn as a frame around its children (`call` > 0 for a repeat call)."""

    address: str
    label: str
    depth: int
    x0: float
    y0: float
    x1: float
    y1: float
    call: int = 0


@dataclass(frozen=True, slots=True)
class LayoutEdge:
    """A polyline from the source's bottom centre to the target's top centre."""

    source: str
    target: str
    points: tuple[tuple[float, float], ...]
    back_edge: bool = False


@dataclass(frozen=True, slots=True)
class Layout:
    """Nodes, frames and edges of one expansion state; `visible` maps every op label to its node id."""

    nodes: tuple[LayoutNode, ...]
    frames: tuple[LayoutFrame, ...]
    edges: tuple[LayoutEdge, ...]
    width: float
    height: float
    expanded: frozenset[str]
    visible: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    _index: dict[str, LayoutNode] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {n.id: n for n in self.nodes})

    def node(self, id: str) -> LayoutNode:
        try:
            return self._index[id]
        except KeyError:
            raise KeyError(f"no layout node {id!r}") from None

    def node_of_op(self, op_label: str) -> LayoutNode:
        """The box an op is drawn in: its own node, or the collapsed/folded module holding it."""
        return self.node(self.visible[op_label])


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
    width: float
    height: float
    placed: list[_Placed]
    index: dict[object, int]  # underlying item (op label / group key) -> position in `placed`
    bends: dict[tuple[int, int], list[tuple[float, float]]]


class _Engine:
    """Per-trace state: the group tree, each edge's lowest common group, and the sub-layout cache."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.tree = GroupTree(trace)
        self.cache: dict[tuple, _Sub] = {}
        self.lca_edges: dict[GroupKey, list[tuple[object, object]]] = {k: [] for k in self.tree.groups}
        self.edges: list[tuple[str, str, GroupKey, object, object]] = []
        seen: set[tuple[str, str]] = set()
        for op in trace.ops:
            for e in op.parents:
                if (e.source, op.label) in seen or e.source not in self.tree.path_of:
                    continue
                seen.add((e.source, op.label))
                cs, ct = self.tree.chain(e.source), self.tree.chain(op.label)
                i = 0
                while cs[i] == ct[i]:
                    i += 1
                lca = cs[i - 1] if i else CANVAS
                self.lca_edges[lca].append((cs[i], ct[i]))
                self.edges.append((e.source, op.label, lca, cs[i], ct[i]))

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
                    placed.append(_Placed("iogroup", tuple(run), 0, 0, text_width(text) + 14, OP_H))
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
                placed.append(_Placed("folded", tuple(run), 0, 0, text_width(label) + 24, FOLDED_H))
                i += len(run)
                continue
            index[item] = len(placed)
            if item[0] in expanded:
                child = self.sub(item, expanded, fold, fold_min)
                label = self.module_label(item)
                w = max(child.width, text_width(label)) + 2 * FRAME_PAD
                placed.append(_Placed("frame", item, 0, 0, w, child.height + FRAME_HEADER + FRAME_PAD, child))
            else:
                placed.append(_Placed("module", item, 0, 0, text_width(self.module_label(item)) + 20, MODULE_H))
            i += 1
        pairs = sorted({(index[a], index[b]) for a, b in self.lca_edges[key] if index[a] < index[b]})
        dag = place_dag([(p.w, p.h) for p in placed], pairs)
        for p, x, y in zip(placed, dag.x0, dag.y0):
            p.x0, p.y0 = x, y
        return _Sub(dag.width, dag.height, placed, index, dag.bends)

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
        return _Placed(kind, label, 0, 0, text_width(self.op_text(label)) + 14, OP_H)

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


_ENGINES: "OrderedDict[int, _Engine]" = OrderedDict()
_MAX_ENGINES = 4


def _engine(trace: Trace) -> _Engine:
    eng = _ENGINES.get(id(trace))
    if eng is None or eng.trace is not trace:
        eng = _ENGINES[id(trace)] = _Engine(trace)
        while len(_ENGINES) > _MAX_ENGINES:
            _ENGINES.popitem(last=False)
    _ENGINES.move_to_end(id(trace))
    return eng


def group_tree(trace: Trace) -> GroupTree:
    """The module-call hierarchy the layout of `trace` is built on (cached with its sub-layouts)."""
    return _engine(trace).tree


def compute_layout(
    trace: Trace, expanded: Iterable[str] = ("",), *, fold_repeats: bool = False, fold_min: int = 2
) -> Layout:
    """Lay out `trace` with the modules in `expanded` drawn as frames and all others as boxes."""
    exp = frozenset(expanded)
    unknown = sorted(a for a in exp if a and a not in trace.modules)
    if unknown:
        raise LayoutModuleUnknownError(
            f"cannot expand {len(unknown)} address(es) that are not modules of this trace: {unknown[:5]}",
            site="compute_layout(expanded=...)", unknown=unknown,
        )
    eng = _engine(trace)
    canvas = eng.sub(CANVAS, exp, fold_repeats, fold_min)
    asm = _Assembly(eng)
    asm.place(canvas, CANVAS, MARGIN, MARGIN, 0)
    edges = asm.route()
    return Layout(
        tuple(asm.nodes), tuple(asm.frames), edges,
        canvas.width + 2 * MARGIN, canvas.height + 2 * MARGIN, exp, asm.visible,
    )


class _Assembly:
    """Turns cached relative sub-layouts into absolute nodes, frames and routed edges."""

    def __init__(self, eng: _Engine) -> None:
        self.eng = eng
        self.nodes: list[LayoutNode] = []
        self.frames: list[LayoutFrame] = []
        self.visible: dict[str, str] = {}
        self.where: dict[GroupKey, tuple[_Sub, float, float]] = {}
        self.boxes: dict[str, tuple[float, float, float, float]] = {}

    def place(self, sub: _Sub, key: GroupKey, ox: float, oy: float, depth: int) -> None:
        self.where[key] = (sub, ox, oy)
        eng = self.eng
        for p in sub.placed:
            x0, y0 = ox + p.x0, oy + p.y0
            if p.kind == "frame":
                address, call = p.item
                self.frames.append(LayoutFrame(address, eng.module_label(p.item), depth, x0, y0, x0 + p.w, y0 + p.h, call))
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

    def route(self) -> tuple[LayoutEdge, ...]:
        out: list[LayoutEdge] = []
        seen: set[tuple[str, str]] = set()
        for src, dst, lca, item_s, item_t in self.eng.edges:
            s, t = self.visible.get(src), self.visible.get(dst)
            if s is None or t is None or s == t or (s, t) in seen:
                continue
            seen.add((s, t))
            sub, ox, oy = self.where[lca]
            vs, vt = sub.index[item_s], sub.index[item_t]
            sb, tb = self.boxes[s], self.boxes[t]
            start = ((sb[0] + sb[2]) / 2, sb[3])
            end = ((tb[0] + tb[2]) / 2, tb[1])
            if vs < vt:
                mid = [(x + ox, y + oy) for x, y in sub.bends.get((vs, vt), ())]
                out.append(LayoutEdge(s, t, (start, *mid, end)))
            else:
                xr = max(sb[2], tb[2]) + BACK_EDGE_OFFSET
                ya, yb = start[1] + V_GAP / 3, end[1] - V_GAP / 3
                out.append(LayoutEdge(s, t, (start, (start[0], ya), (xr, ya), (xr, yb), (end[0], yb), end), True))
        return tuple(out)


def default_expansion(trace: Trace) -> frozenset[str]:
    """Expand containers down to the outermost repeated blocks (root, `model`, `model.layers` for a Llama)."""
    tree = _engine(trace).tree
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
