"""A deterministic, nesting-aware, layered top-to-bottom layout of a Trace.

Coordinates are abstract units (about 1 px at 100 % zoom) and y grows downward. A module in
`expanded` is a frame around its children, every other module one box; with `fold_repeats`,
runs of structurally identical sibling blocks become one "x N" box. A module called more than once
under one parent (a looped block) is one "x N calls" box until its calls are listed or one is opened
(`calls`: entries such as `block#2`). Each expanded module's
children are laid out as a small DAG (see `dag`), recursively, and cached by the expansion
state of its subtree, so a click re-lays out only the path from the root to the clicked module.
`assembly` turns the sub-layouts into absolute boxes and edges routed around boxes and frames (see
`routing`). The cache belongs to a `LayoutEngine`, one per owner (an app session, a notebook view):
nothing is shared between owners.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import LayoutModuleUnknownError
from tracer.ir import INPUT_KIND, OUTPUT_KIND, Trace

from .assembly import Assembly
from .calls import call_entries, call_entry, split_entry
from .dag import SPACING, DagPlacement, DagShape, Spacing, dag_shape, place_dag
from .groups import CANVAS, ROOT, SPAN_CLASS, Group, GroupKey, GroupTree
from .result import Layout
from .style import FOLDED_H, FRAME_HEADER, FRAME_PAD, MODULE_H, OP_H, box_width, header_width, shape_text

MARGIN = 10.0
IO_FOLD_MIN = 3  # this many consecutive outputs under one name (e.g. a KV cache) draw as one box


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

    def __init__(self, trace: Trace, hidden: Iterable[str] = (), spacing: Spacing = SPACING,
                 transposed: bool = False) -> None:
        self.trace = trace
        self.transposed = transposed  # boxes laid out with width and height swapped (see `direction.transpose`)
        self.spacing = spacing  # gaps between boxes and rows (`dag.COMPACT` for print)
        self.hidden = frozenset(hidden)  # op labels left out; an edge through one joins its neighbours
        self.tree = GroupTree(trace, self.hidden)
        self.cache: dict[tuple, _Sub] = {}
        self.shapes: dict[tuple, DagShape] = {}  # (item count, edges, ports) -> row order and dummies
        self.placements: dict[tuple, DagPlacement] = {}  # ... and sizes -> coordinates (identical blocks share one)
        self.lca_edges: dict[GroupKey, list[tuple[object, object]]] = {k: [] for k in self.tree.groups}
        self.edges: list[tuple[str, str, GroupKey, tuple, tuple, int, object, object]] = []
        self.edges_under: dict[GroupKey, list[int]] = {}  # lowest common group -> its edges' positions in `edges`
        self.io_head = self._io_heads()
        self._header_w: dict[GroupKey, float] = {}
        self._labels_in: dict[GroupKey, tuple[str, ...]] = {}
        self._calls: frozenset[str] = frozenset()  # the call entries (`block#2`) of the layout being built
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
            self.edges_under.setdefault(lca, []).append(len(self.edges))
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
        unknown = sorted(a for a in exp if a and not self.knows(a))
        if unknown:
            raise LayoutModuleUnknownError(
                f"cannot expand {len(unknown)} address(es) that are not modules of this trace: {unknown[:5]}",
                site="compute_layout(expanded=...)", unknown=unknown,
            )
        if len(self.cache) > self.MAX_CACHED:
            self.cache.clear()
            self.placements.clear()
            self.shapes.clear()
        self._calls = call_entries(exp)
        canvas = self.sub(CANVAS, exp, fold_repeats, fold_min)
        asm = Assembly(self)
        asm.place(canvas, CANVAS, MARGIN, MARGIN, 0)
        edges = asm.route()
        return Layout(
            tuple(asm.nodes), tuple(asm.frames), edges,
            canvas.width + 2 * MARGIN, canvas.height + 2 * MARGIN, exp, asm.visible, groups=self.tree,
            hidden=self.hidden,
        )

    def knows(self, entry: str) -> bool:
        """Whether an expansion entry names a module of this trace (or one of its calls: `block#2`, `block#`)."""
        if entry in self.tree.spans:
            return True
        address, call, is_call = split_entry(entry)
        scope = self.trace.modules.get(address)
        return scope is not None and (not is_call or call is None or 0 <= call < max(len(scope.calls), 1))

    def default_expansion(self) -> frozenset[str]:
        """Expand containers down to the outermost repeated blocks (see `default_expansion`)."""
        return _default_expansion(self.trace, self.tree)

    def labels_in(self, key: GroupKey) -> tuple[str, ...]:
        """Labels of every op inside group `key`, in execution order (cached)."""
        labels = self._labels_in.get(key)
        if labels is None:
            labels = self._labels_in[key] = tuple(op.label for op in self.tree.groups[key].all_ops)
        return labels

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
        calls = frozenset(e for e in self._calls if split_entry(e)[0] in g.subtree) if self._calls else frozenset()
        ck = (key, expanded & g.subtree, calls, fold, fold_min)
        hit = self.cache.get(ck)
        if hit is None:
            hit = self.cache[ck] = self._layout_group(key, expanded, fold, fold_min)
        return hit

    def _layout_group(self, key: GroupKey, expanded: frozenset[str], fold: bool, fold_min: int) -> _Sub:
        placed: list[_Placed] = []
        index: dict[object, int] = {}
        items = self.tree.items(key)
        loops = self._loops(items, expanded)
        i = 0
        while i < len(items):
            item = items[i]
            if not isinstance(item, str) and item[0] in loops:
                if item in index:  # a later call of a folded loop: drawn by its first call's box
                    i += 1
                    continue
                run = loops[item[0]]
                for member in run:
                    index[member] = len(placed)
                placed.append(_Placed("folded", tuple(run), 0, 0, *self._box(box_width(self.fold_label(run), 24), FOLDED_H)))
                i += 1
                continue
            if isinstance(item, str):
                run = self._io_run(items, i)
                for label in run:
                    index[label] = len(placed)
                if len(run) >= IO_FOLD_MIN:
                    text = self.io_group_label(run)
                    placed.append(_Placed("iogroup", tuple(run), 0, 0, *self._box(box_width(text), OP_H)))
                else:
                    placed.append(self._op_item(item))
                    run = [item]
                i += len(run)
                continue
            run = self._fold_run(items, i, expanded, loops) if fold else [item]
            if len(run) >= max(fold_min, 2):
                label = self.fold_label(run)
                for member in run:
                    index[member] = len(placed)
                placed.append(_Placed("folded", tuple(run), 0, 0, *self._box(box_width(label, 24), FOLDED_H)))
                i += len(run)
                continue
            index[item] = len(placed)
            if item[0] in expanded or (self._calls and call_entry(*item) in expanded):
                child = self.sub(item, expanded, fold, fold_min)
                w = max(child.width, self.header_width(item)) + 2 * FRAME_PAD
                placed.append(_Placed("frame", item, 0, 0, w, child.height + FRAME_HEADER + FRAME_PAD, child))
            else:
                placed.append(_Placed("module", item, 0, 0, *self._box(box_width(self.module_label(item), 20), MODULE_H)))
            i += 1
        pairs = {(index[a], index[b]) for a, b in self.lca_edges[key] if index[a] < index[b]}
        sizes = [(p.w, p.h) for p in placed]
        in_ports = self._ports(self.in_ports.get(key, {}), index, sizes, pairs, entering=True)
        out_ports = self._ports(self.out_ports.get(key, {}), index, sizes, pairs, entering=False)
        dag = self._place(sizes, sorted(pairs), frozenset(in_ports.values()), frozenset(out_ports.values()))
        for p, x, y in zip(placed, dag.x0, dag.y0):
            p.x0, p.y0 = x, y
        return _Sub(dag.width, dag.height, placed, index, dag, in_ports, out_ports)

    def _place(self, sizes: list, edges: list, top: frozenset[int], bottom: frozenset[int]) -> DagPlacement:
        """`place_dag`, computed once per distinct group structure and sizes (repeated blocks share it)."""
        topo = (len(sizes), tuple(edges), top, bottom)
        key = (topo, tuple(sizes))
        dag = self.placements.get(key)
        if dag is None:
            shape = self.shapes.get(topo)
            if shape is None:
                shape = self.shapes[topo] = dag_shape(len(sizes), edges, top, bottom)
            dag = self.placements[key] = place_dag(sizes, edges, top, bottom, self.spacing, shape)
        return dag

    def _ports(self, wanted: dict, index: dict, sizes: list, pairs: set, entering: bool) -> dict[object, int]:
        ports: dict[object, int] = {}
        for port_key, inner in wanted.items():
            node = ports[port_key] = len(sizes)
            sizes.append((self.spacing.dummy_w, 0.0))
            for item in inner:
                pairs.add((node, index[item]) if entering else (index[item], node))
        return ports

    def _loops(self, items: list, expanded: frozenset[str]) -> dict[str, list[GroupKey]]:
        """Blocks called more than once among these items and not opened: address -> its calls here. A
        one-op module used twice (a shared activation) is no loop: its calls stay in execution order."""
        calls: dict[str, list[GroupKey]] = {}
        for item in items:
            if not isinstance(item, str):
                calls.setdefault(item[0], []).append(item)
        return {a: run for a, run in calls.items()
                if len(run) > 1 and len(self.tree.groups[run[0]].all_ops) > 1 and not self._loop_open(a, expanded)}

    def _loop_open(self, address: str, expanded: frozenset[str]) -> bool:
        """Whether a module's calls are drawn one by one: it is open, or an entry lists or opens a call."""
        if address in expanded:
            return True
        if not self._calls:
            return False
        prefix = call_entry(address)
        return any(e.startswith(prefix) for e in self._calls)

    def _fold_run(self, items: list, start: int, expanded: frozenset[str], loops: dict) -> list[GroupKey]:
        first = items[start]
        sig = self.tree.groups[first].signature
        run: list[GroupKey] = []
        run_addresses: set[str] = set()  # a module met twice is looped: its calls never join a run
        for item in items[start:]:
            if (isinstance(item, str) or item[0] in expanded or self.tree.groups[item].signature != sig
                    or self.tree.groups[item].class_name == SPAN_CLASS
                    or item[0] in loops or self._loop_open(item[0], expanded) or item[0] in run_addresses):
                break
            run.append(item)
            run_addresses.add(item[0])
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
        return _Placed(kind, label, 0, 0, *self._box(box_width(self.op_text(label)), OP_H))

    def _box(self, w: float, h: float) -> tuple[float, float]:
        """A box's size in layout axes: swapped when the layout will be turned on its side."""
        return (h, w) if self.transposed else (w, h)

    # -- text ---------------------------------------------------------------
    def op_text(self, label: str) -> str:
        op = self.trace[label]
        head = op.label if op.kind in (INPUT_KIND, OUTPUT_KIND) else op.kind
        shape = shape_text(op.out.shape) if op.out is not None else ""
        return f"{head} {shape}".strip()

    def module_label(self, key: GroupKey) -> str:
        address, call = key
        cls = self.tree.groups[key].class_name
        if cls == SPAN_CLASS:
            return span_label(self.tree.groups[key])
        if not address:
            return cls
        name = address.rsplit(".", 1)[-1] + (f"#{call}" if call else "")
        return f"{name}: {cls}"

    def fold_label(self, run: list[GroupKey]) -> str:
        """`layers.0-11: LlamaDecoderLayer x12` for sibling blocks; `block: Sequential x3 calls` for one looped module."""
        first, last = run[0][0], run[-1][0]
        cls = self.tree.groups[run[0]].class_name
        if first == last:  # the same module called again and again
            return f"{first.rsplit('.', 1)[-1]}: {cls} x{len(run)} calls"
        head, _, a = first.rpartition(".")
        _, _, b = last.rpartition(".")
        prefix = head.rsplit(".", 1)[-1] + "." if head else ""
        return f"{prefix}{a}-{b}: {cls} x{len(run)}"


def span_label(group: Group) -> str:
    """`ops 12-4,107 (2,209)`: the first and last op index in a span, and how many ops it holds."""
    return f"ops {group.all_ops[0].index:,}-{group.all_ops[-1].index:,} ({len(group.all_ops):,})"


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
