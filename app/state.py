"""One explorer session's state: the trace, what is expanded, what is selected, the claim state.

Views watch these parameters; actions (toggle, select, search, discharge results) change them.
Layout comes from `exporters.layout`; this object only decides which modules are expanded.
"""
from __future__ import annotations

import copy
import threading
import time
from typing import Any

import param

from exporters.layout import LayoutEngine
from exporters.layout.calls import path_entries, toggle_module
from tracer.module_tree import module_param_counts

from . import offloop, view_budget
from .ladder import LadderView, ladder_view
from .search_index import SearchIndex
from exporters.search_terms import rank
from .sources import Loaded


AUTO_FOLD_NODES = 80  # a default view with more boxes than this starts with repeated blocks folded
# "Expand all" over more ops or edges than these is refused: its layout (about 0.7 s cold for the default
# Llama's 1,979 ops and 2,458 edges, 7.5 s for a trace of 11,218 edges) would hold every session's loop.
EXPAND_ALL_MAX_OPS = 3_000
EXPAND_ALL_MAX_EDGES = 3_000


_SHARED: dict[int, tuple[Any, LayoutEngine, SearchIndex]] = {}  # id(trace) -> (trace, layout structure, op search)
_SHARED_LOCK = threading.Lock()


def _shared(trace: Any) -> tuple[Any, LayoutEngine, SearchIndex]:
    """What every session of `trace` reads and nobody changes, made once per trace."""
    with _SHARED_LOCK:
        hit = _SHARED.get(id(trace))
        if hit is None or hit[0] is not trace:
            template = LayoutEngine(trace)
            template.tree.param_count("")  # fill its one lazy memo now: afterwards it is only read
            trace.children_of("")  # and the trace's consumer index, which the first selection would build
            hit = _SHARED[id(trace)] = (trace, template, SearchIndex(trace.ops))
    return hit


def session_engine(trace: Any) -> LayoutEngine:
    """A layout engine of its own for one session: the trace's group tree, edges and ports are built
    once per trace and only read (never changed after construction); the sub-layout and header
    caches, the parts that change, are the session's own."""
    engine = copy.copy(_shared(trace)[1])
    engine.cache = {}
    engine._header_w = {}
    return engine


def search_index(trace: Any) -> SearchIndex:
    """The op search of `trace` (labels and module paths), made once per trace."""
    return _shared(trace)[2]


def expand_all_size(trace: Any, under: str = "") -> tuple[int, int]:
    """(ops, edges into them) that "Expand all" under module `under` ("" for the whole graph) would draw, at most."""
    inside = [op for op in trace.ops if not under or op.module == under or op.module.startswith(under + ".")]
    return len(inside), sum(len(op.parents) for op in inside)


FILTERS = ("kind", "class", "shape")


def parse_query(query: str) -> tuple[list[str], dict[str, str]]:
    """A search's plain words (lower case) and its `kind:`, `class:` and `shape:` filters."""
    words, filters = [], {}
    for token in query.strip().split():
        name, sep, value = token.partition(":")
        if sep and name.lower() in FILTERS and value:
            filters[name.lower()] = value.lower()
        else:
            words.append(token.lower())
    return words, filters


def op_passes(op: Any, filters: dict[str, str], trace: Any) -> bool:
    """Whether `op` passes every search filter (kind exact, module class exact, shape substring)."""
    if "kind" in filters and op.kind.lower() != filters["kind"]:
        return False
    if "class" in filters:
        classes = {trace.modules[a].class_name.lower() for a, _ in op.module_stack if a in trace.modules}
        if filters["class"] not in classes:
            return False
    if "shape" in filters:
        shape = "x".join(str(d) for d in op.out.shape) if op.out is not None else ""
        if filters["shape"].replace("\u00d7", "x").replace(",", "x") not in shape:
            return False
    return True


class ExplorerState(param.Parameterized):
    """Everything one browser session shares between its views."""

    expanded = param.Parameter(default=frozenset({""}), doc="module addresses drawn as open frames")
    fold_repeats = param.Boolean(default=False, doc="fold runs of identical repeated blocks")
    selected = param.String(default="", doc="label of the op shown in the inspector")
    focused = param.String(default="", doc="module address focused from the tree or search")
    layout = param.Parameter(default=None, doc="exporters.layout.Layout of the current view")
    layout_ms = param.Number(default=0.0, doc="milliseconds the last layout took")
    ladder = param.Parameter(default=None, doc="LadderView shown by the banner")
    report = param.Parameter(default=None, doc="the last discharge report")
    message = param.String(default="", doc="the last status or refusal, readable")
    query = param.String(default="", doc="the last search (kept in the URL)")
    centre_on = param.String(default="", doc='what the view centres on after a change: "module:<address>" or "op:<label>"')
    layout_pending = param.String(default="", doc="what a layout still running off the loop is laying out; '' when none")
    comparison = param.Parameter(default=None, doc="a finished Compare the main graph colours by: "
                                 "(legend title, {op label: divergence score}); None when cleared")

    def __init__(self, loaded: Loaded, **params: Any) -> None:
        super().__init__(**params)
        self._jobs = offloop.OffLoop()  # this session's layouts off the loop (one at a time, the newest wins)
        # How a layout laid out off the loop reaches this session: None is the served document's next tick
        # (`offloop.deliverer` of `document`), and inline outside a served session; a notebook or a test may set its own.
        self.deliver_layouts: offloop.Deliver | None = None
        # The served session's Bokeh document this state's page is in, bound once the page joins its session
        # (`app.explorer.build_app`; a page may be built ahead on another thread); None outside a server.
        self.document: Any = None
        self.keep_tools_open = False  # set by select_op(keep_tools_open=True): the side tools stay open
        # Each session discharges its own copy: the envelope changes, the shared ops do not.
        self.loaded = loaded
        # The session's own layout engine: its caches are never shared with another session. A new
        # envelope (discharge) gives a new Trace over the same graph, so the engine stays valid. Made
        # first: it fills the trace's lazy indexes, which the session's copy then shares.
        self.engine = session_engine(loaded.trace)
        self.trace = copy.copy(loaded.trace)
        self._param_totals = module_param_counts(self.trace)
        if "expanded" not in params:
            self.expanded = frozenset(self.engine.default_expansion())
        self.ladder = ladder_view(self.trace)
        self.relayout()
        if "fold_repeats" not in params and len(self.layout.nodes) > AUTO_FOLD_NODES:
            self.fold_repeats = True  # e.g. 126 decoder layers: one "x126" box until the user unfolds
        self.default_fold = self.fold_repeats

    # -- layout ---------------------------------------------------------------------
    @param.depends("expanded", "fold_repeats", watch=True)
    def relayout(self) -> None:
        """Lay out the view asked for: a view past `view_budget`'s bound is refused (the view drawn stays); in
        a served session a view past its off-loop size is laid out on a worker thread (`app.offloop`) and
        applied on the session's next tick, unless a newer request came first; others here and now."""
        if getattr(self, "_keep_layout", False):  # back to the view already drawn (below): nothing to lay out
            self._keep_layout = False
            return
        jobs = self._jobs
        ops, edges = view_budget.drawn_size(self.engine, self.expanded, self.fold_repeats)
        too_big = view_budget.refusal_for(ops, edges)
        drawn = self._drawn_view()
        if too_big and drawn != (self.expanded, self.fold_repeats):  # past the bound: back to the view drawn
            self._back_to_drawn(drawn)
            view_budget.say_after_the_action(self, too_big)
            return
        deliver = (self.deliver_layouts or offloop.deliverer(self.document)) if self.layout is not None else None  # the first: inline
        if deliver is None or not view_budget.off_loop(ops, edges):
            jobs.supersede()
            started = time.perf_counter()
            computed = self.engine.layout(self.expanded, fold_repeats=self.fold_repeats)
            self._apply_layout(computed, (self.expanded, self.fold_repeats), time.perf_counter() - started)
            return
        view = (self.expanded, self.fold_repeats)
        engine = copy.copy(self.engine)  # its own `_calls` (set per layout); the caches are the session's, shared
        self.layout_pending = f"laying out {ops:,} ops and {edges:,} edges in the background"
        jobs.submit(lambda: engine.layout(view[0], fold_repeats=view[1]),
                    done=lambda computed, took: self._apply_layout(computed, view, took),
                    over=lambda took: self._layout_over(took, ops, edges), failed=self._layout_failed,
                    deliver=deliver)

    def _apply_layout(self, computed: Any, view: tuple[frozenset, bool], seconds: float) -> None:
        self.layout_ms = seconds * 1000
        self._drawn = view
        self.layout_pending = ""
        self.layout = computed

    def _drawn_view(self) -> tuple[frozenset, bool]:
        """(expansion, folding) of the view on screen: the last one laid out, else the default."""
        return getattr(self, "_drawn", None) or (frozenset(self.engine.default_expansion()), self.fold_repeats)

    def _back_to_drawn(self, drawn: tuple[frozenset, bool]) -> None:
        """Return the expansion and folding to the view drawn (nothing is laid out again when it is drawn)."""
        self._jobs.supersede()
        self.layout_pending = ""
        self._keep_layout = self.layout is not None and drawn == getattr(self, "_drawn", None)
        if drawn == (self.expanded, self.fold_repeats):
            self._keep_layout = False
            return
        self.param.update(expanded=drawn[0], fold_repeats=drawn[1])

    def _layout_over(self, seconds: float, ops: int, edges: int) -> None:
        """A background layout ran past its bound: it was stopped; the view drawn stays, and the status line says so."""
        self._back_to_drawn(self._drawn_view())
        self.message = (f"Not drawn: laying out that view ({ops:,} ops, {edges:,} edges) took over "
                        f"{seconds:.0f} s and was stopped; the view stays as it was. Open fewer modules at once.")

    def _layout_failed(self, error: BaseException) -> None:
        from .views.docsync import refusal_text

        self._back_to_drawn(self._drawn_view())
        self.message = f"Not drawn: {refusal_text(error)}"

    def toggle(self, address: str, call: int | None = None) -> None:
        """Expand a collapsed module or collapse an expanded one (the root stays open); for a module called
        more than once, `call` toggles that call alone and no `call` lists or folds its calls."""
        scope = self.trace.modules.get(address)
        new = toggle_module(self.expanded, address, len(scope.calls) if scope else 0, call) | {""}
        opening = new > self.expanded
        self.centre_on = f"module:{address}"
        self.expanded = new
        what = f"{address or '(root)'}" + (f" call {call}" if call is not None and scope and len(scope.calls) > 1 else "")
        self.message = f"{'Opened' if opening else 'Closed'} {what}."

    def expand_to(self, address: str, *, include_self: bool = False) -> None:
        """Open every ancestor of `address` (and itself if asked) so it is visible."""
        parts = address.split(".") if address else []
        opened = {""} | {".".join(parts[:i]) for i in range(1, len(parts) + (1 if include_self else 0))}
        opened |= self.engine.tree.spans_around((address, 0))  # a module inside a stretch of a long forward
        if not opened <= self.expanded:
            self.expanded = self.expanded | opened

    # -- selection ------------------------------------------------------------------------
    def select_op(self, label: str, *, keep_tools_open: bool = False) -> None:
        """Show op `label` in the inspector and open the modules around it. `keep_tools_open`: asked by a side
        tool (Compare's jump), whose panel stays open to show what it found, instead of folding away."""
        self.keep_tools_open = keep_tools_open
        op = self.trace[label]
        self.centre_on = f"op:{label}"
        opened = path_entries(op.module, op.module_stack, self.trace.modules)  # only the call it ran in
        opened |= self.engine.tree.spans_around(label)  # and the stretches of ops it sits in (a long forward)
        if not opened <= self.expanded:
            self.expanded = self.expanded | opened
        self.param.update(selected=label, focused=op.module)
        self.param.trigger("centre_on")  # the view goes to it even when nothing had to open

    def focus_module(self, address: str) -> None:
        """Focus a module from the tree: open its ancestors and toggle it."""
        if address not in self.trace.modules:
            raise KeyError(f"no module at {address!r}")
        self.expand_to(address)
        self.focused = address
        self.toggle(address)

    def search(self, query: str, limit: int | None = 20) -> list[tuple[str, str]]:
        """Ops and modules matching `query`: [(kind, id)], best first (`exporters.search_terms.rank`: the
        exact label, then exact names, aliases and whole words, substrings, module paths; numbers whole).
        Words match an op's label, kind, function, module path or class, a module's address or class, and the
        common words' aliases (softmax, sdpa, attention, matmul, norm, ...); `kind:K`, `class:C` and `shape:S`
        keep ops whose kind is K, that run inside a module of class C, or whose output shape contains S
        (e.g. `shape:4096`, `shape:1x8`)."""
        words, filters = parse_query(query)
        if not words and not filters:
            return []
        q = " ".join(words)
        hits: list[tuple[tuple[int, float], int, int, str, str]] = []
        if not filters:
            for order, (address, scope) in enumerate(self.trace.modules.items()):
                if address:
                    r = rank(q, address, (address.rsplit(".", 1)[-1], scope.class_name), address)
                    if r[0] < 99:
                        hits.append((r, 1, order, "module", address))
        ops, index = self.trace.ops, search_index(self.engine.trace)  # the same ops after a discharge
        found = index.ranked(q) if q else [((1, 1.0), i) for i in range(len(ops))]
        for r, i in found:
            if filters and not op_passes(ops[i], filters, self.trace):
                continue
            hits.append((r, 0, i, "op", ops[i].label))
        hits.sort(key=lambda h: (h[0][0], -h[0][1], h[1], h[2]))  # rank, then ops before modules, then order
        return [(kind, ident) for *_r, kind, ident in (hits if limit is None else hits[:limit])]

    def go(self, query: str) -> str:
        """Select the best search hit; returns a readable line saying what happened."""
        self.query = query.strip()
        hits = self.search(query, limit=1)
        if not hits:
            self.message = f"Nothing matches {query!r}."
            return self.message
        kind, ident = hits[0]
        if kind == "op":
            self.select_op(ident)
            self.message = f"Op {ident} selected."
        else:
            self.show_module(ident)
        return self.message

    def show_module(self, address: str) -> None:
        """Open module `address` (and its ancestors), focus it and move the view to it; "" shows the whole graph."""
        if address and address not in self.trace.modules:
            raise KeyError(f"no module at {address!r}")
        self.centre_on = f"module:{address}" if address else ""
        if address:
            self.expand_to(address, include_self=True)
        self.param.update(selected="", focused=address)
        self.param.trigger("centre_on")
        self.message = f"Module {address} opened." if address else "The whole graph."

    def expand_all(self) -> None:
        """Open every module under the focused one (every module when none is focused)."""
        under = self.focused
        ops, edges = expand_all_size(self.trace, under)
        if ops > EXPAND_ALL_MAX_OPS or edges > EXPAND_ALL_MAX_EDGES:  # laid out on the server's one loop: all would wait
            where = f" under {under}" if under else ""
            self.message = (f"Expand all refused: {ops:,} ops and {edges:,} edges{where} are too many to draw "
                            f"expanded at once (at most {EXPAND_ALL_MAX_OPS:,} ops and {EXPAND_ALL_MAX_EDGES:,} "
                            f"edges); open modules one by one.")
            return
        opened = {a for a in self.trace.modules if not under or a == under or a.startswith(under + ".")}
        self.expand_to(under)
        self.centre_on = f"module:{under}" if under else ""
        self.expanded = self.expanded | opened | {""}
        self.message = f"Opened every module under {under}." if under else "Opened every module."

    def collapse_all(self) -> None:
        """Close every module: the root's children as boxes."""
        self.centre_on = ""
        self.param.update(selected="", focused="")
        self.expanded = frozenset({""})
        self.message = "Closed every module."

    # -- claims -------------------------------------------------------------------------------
    def set_report(self, report: Any) -> None:
        """Record a discharge report and carry its new envelope (discharge changes no trace in place)."""
        envelope = getattr(report, "envelope", None)
        if envelope is not None:
            self.trace = self.trace.with_envelope(envelope)
        self.report = report
        self.ladder = ladder_view(self.trace, report)

    @property
    def ladder_view(self) -> LadderView:
        return self.ladder

    def params_under(self, address: str) -> int:
        """Parameters (tied counted once, buffers excluded) of a module and its submodules."""
        return self._param_totals.get(address, 0)
