"""The module-nesting hierarchy a layout draws: every (module, call) that ran ops, as a tree of groups.

Runtime nesting comes from each op's `module_stack`; containers that never run a forward of their
own (ModuleList, an iterated Sequential) are put back in from the static module tree, so
`model.layers` frames `model.layers.0..31`. The canvas (key `CANVAS`) holds the model's inputs,
its outputs and the root module's group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from hashlib import blake2b

from tracer.ir import INPUT_KIND, OUTPUT_KIND, Op, Trace
from tracer.module_tree import module_param_counts

GroupKey = tuple[str, int]  # (module address, call index)
CANVAS: GroupKey = ("", -1)
ROOT: GroupKey = ("", 0)
SPAN_CLASS = "ops"  # class name of a span group: a stretch of one module call's items, not a module
SPAN_MARK = "~"  # a span's address: `<module address>~<first op index>-<last op index>` (never in a module path)
SPAN_LIMIT = 256  # a group with more direct items than this shows them in spans, nested as deep as needed


@dataclass(slots=True)
class Group:
    """One module call that ran ops, with its direct items in execution order."""

    key: GroupKey
    class_name: str
    parent: GroupKey | None
    first: int = 1 << 62  # smallest op index inside (the group's place in execution order)
    ops: list[str] = field(default_factory=list)  # direct ops (labels)
    children: list[GroupKey] = field(default_factory=list)  # direct child groups
    all_ops: list[Op] = field(default_factory=list)  # every op inside, in execution order
    subtree: frozenset[str] = frozenset()  # addresses of the groups strictly below this one
    signature: str = ""  # equal signatures: structurally identical blocks (foldable)

    @property
    def address(self) -> str:
        return self.key[0]

    @property
    def call(self) -> int:
        return self.key[1]


def group_id(key: GroupKey) -> str:
    """Layout node id of a collapsed group: `mod:<address>` (`mod:<address>:<call>` after the first call)."""
    return f"mod:{key[0]}" if key[1] == 0 else f"mod:{key[0]}:{key[1]}"


class GroupTree:
    """Groups of one trace, each op's chain of groups, and every item's execution order."""

    def __init__(self, trace: Trace, skip: frozenset[str] = frozenset()) -> None:
        self.trace = trace
        self.skip = skip  # op labels left out (hidden plumbing): they join no group
        self._param_counts: dict[str, int] | None = None
        self.parent_of: dict[str, str] = {}
        for scope in trace.modules.values():
            for child in scope.children:
                self.parent_of[child] = scope.address
        self.groups: dict[GroupKey, Group] = {CANVAS: Group(CANVAS, "canvas", None)}
        self.path_of: dict[str, tuple[GroupKey, ...]] = {}  # op label -> groups below the canvas
        self.order: dict[object, int] = {}  # item (op label or group key) -> execution order
        paths: dict[tuple, tuple[GroupKey, ...]] = {}
        for op in trace.ops:
            if op.label in skip:
                continue
            stack = () if op.kind in (INPUT_KIND, OUTPUT_KIND) else op.module_stack
            path = paths.get(stack)
            if path is None:
                path = paths[stack] = self._path(stack)
            self.path_of[op.label] = path
            self.order[op.label] = op.index
            self._register(op, path)
        for g in self.groups.values():
            g.children.sort(key=lambda k: self.groups[k].first)
        self.spans: frozenset[str] = frozenset()
        self._split_into_spans()
        self._finish(CANVAS)

    # -- building ------------------------------------------------------------
    def _path(self, stack: tuple[tuple[str, int], ...]) -> tuple[GroupKey, ...]:
        path: list[GroupKey] = []
        prev: tuple[str, int] | None = None
        for addr, call in stack:
            if prev is not None:
                path.extend((a, prev[1]) for a in self._containers_between(prev[0], addr))
            path.append((addr, call))
            prev = (addr, call)
        return tuple(path)

    def _containers_between(self, outer: str, inner: str) -> list[str]:
        """Never-called tree ancestors of `inner` strictly below `outer` (outermost first)."""
        found: list[str] = []
        addr = self.parent_of.get(inner)
        while addr is not None and addr != outer:
            scope = self.trace.modules.get(addr)
            if scope is None or scope.calls:
                return []  # not a plain container chain: keep the runtime nesting as recorded
            found.append(addr)
            addr = self.parent_of.get(addr)
        return found[::-1] if addr == outer else []

    def _register(self, op: Op, path: tuple[GroupKey, ...]) -> None:
        parent = CANVAS
        self.groups[CANVAS].all_ops.append(op)
        for key in path:
            g = self.groups.get(key)
            if g is None:
                scope = self.trace.modules.get(key[0])
                g = self.groups[key] = Group(key, scope.class_name if scope else "?", parent)
                self.groups[parent].children.append(key)
                self.order[key] = op.index
            g.first = min(g.first, op.index)
            g.all_ops.append(op)
            parent = key
        self.groups[parent].ops.append(op.label)

    def _split_into_spans(self) -> None:
        """Give every group with more than `SPAN_LIMIT` direct items spans of consecutive items instead
        (balanced: b spans of b^k items, each split again), so no view draws more than the limit in one
        group; then re-derive every op's chain of groups. Nothing happens when no group is that large."""
        crowded = [k for k, g in self.groups.items() if k != CANVAS and len(g.ops) + len(g.children) > SPAN_LIMIT]
        if not crowded:
            return
        for key in crowded:
            self._span(key, self.items(key))
        path_to: dict[GroupKey, tuple[GroupKey, ...]] = {CANVAS: ()}

        def path(key: GroupKey) -> tuple[GroupKey, ...]:
            chain: list[GroupKey] = []
            k: GroupKey | None = key
            while k is not None and k not in path_to:
                chain.append(k)
                k = self.groups[k].parent
            known = path_to[k] if k is not None else ()
            for k2 in reversed(chain):
                known = path_to[k2] = (*known, k2)
            return known

        for key, g in self.groups.items():
            if key != CANVAS:
                p = path(key)
                for label in g.ops:
                    self.path_of[label] = p
        self.spans = frozenset(k[0] for k, g in self.groups.items() if g.class_name == SPAN_CLASS)

    def _span(self, key: GroupKey, items: list[object]) -> None:
        """Replace `key`'s direct items by spans of them (recursively while a span holds too many)."""
        n = len(items)
        levels = 1
        while SPAN_LIMIT ** (levels + 1) < n:
            levels += 1
        branch = 2
        while branch ** (levels + 1) < n:  # the smallest even branching that covers n in levels + 1 steps
            branch += 1
        size = branch ** levels
        g = self.groups[key]
        module, call = key[0].split(SPAN_MARK, 1)[0], key[1]
        g.ops, g.children = [], []
        for start in range(0, n, size):
            chunk = items[start:start + size]
            ops_in = [op for item in chunk for op in ([self.trace[item]] if isinstance(item, str) else self.groups[item].all_ops)]
            lo, hi = ops_in[0].index, ops_in[-1].index
            span = (f"{module}{SPAN_MARK}{lo}-{hi}", call)
            sg = self.groups[span] = Group(span, SPAN_CLASS, key, first=lo, all_ops=ops_in)
            g.children.append(span)
            self.order[span] = lo
            for item in chunk:
                if isinstance(item, str):
                    sg.ops.append(item)
                else:
                    sg.children.append(item)
                    self.groups[item].parent = span
            if len(chunk) > SPAN_LIMIT:
                self._span(span, chunk)

    def _finish(self, root: GroupKey) -> None:
        """Each group's subtree addresses and signature, children before parents (no recursion)."""
        order: list[GroupKey] = []
        stack = [root]
        while stack:
            key = stack.pop()
            order.append(key)
            stack.extend(self.groups[key].children)
        for key in reversed(order):
            g = self.groups[key]
            below: set[str] = set()
            for child in g.children:
                below.add(child[0])
                below |= self.groups[child].subtree
            g.subtree = frozenset(below)
            g.signature = self._signature(g)

    def _signature(self, g: Group) -> str:
        """Class plus the op kinds, relative module paths and internal wiring of everything inside."""
        where = {op.label: i for i, op in enumerate(g.all_ops)}
        prefix = g.address + "." if g.address else ""
        h = blake2b(g.class_name.encode("utf-8", "surrogatepass"), digest_size=12)
        for op in g.all_ops:
            if op.module == g.address:
                rel = ""
            else:
                rel = op.module[len(prefix):] if op.module.startswith(prefix) else op.module
            wires = ",".join(str(where.get(e.source, -1)) for e in op.parents)
            shape = op.out.shape if op.out is not None else ()
            h.update(f"{op.kind}|{rel}|{wires}|{shape}|{op.out.dtype if op.out else ''};".encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    # -- queries -------------------------------------------------------------
    def items(self, key: GroupKey) -> list[object]:
        """Direct items of a group (op labels and child group keys) in execution order."""
        g = self.groups[key]
        return sorted([*g.ops, *g.children], key=self.order.__getitem__)

    def chain(self, label: str) -> tuple[object, ...]:
        """The items an op sits in, outermost first, ending with the op itself."""
        return (*self.path_of[label], label)

    def addresses(self) -> frozenset[str]:
        return self.groups[CANVAS].subtree

    def spans_around(self, item: str | GroupKey) -> set[str]:
        """Addresses of the spans an op (label) or a group (key) sits in: the entries that make it
        visible besides its modules'."""
        if not self.spans:
            return set()
        if isinstance(item, str):
            return {key[0] for key in self.path_of.get(item, ()) if key[0] in self.spans}
        out, g = set(), self.groups.get(item)
        while g is not None and g.parent is not None:
            if g.parent[0] in self.spans:
                out.add(g.parent[0])
            g = self.groups.get(g.parent)
        return out

    def param_count(self, address: str) -> int:
        """Parameters registered under `address` (tied ones once; buffers excluded)."""
        if self._param_counts is None:
            self._param_counts = module_param_counts(self.trace)
        return self._param_counts.get(address, 0)
