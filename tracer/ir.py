"""The trace IR: plain, immutable records of one captured forward pass.

Nothing here touches torch hooks or tensors; values live in a separate store
(`Trace.values`), so exporters and the app read structure only.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from .provenance import Provenance


def fast_constructor(cls: type) -> Callable[..., Any]:
    """`cls(...)` of a frozen slotted dataclass at a fraction of its cost (same fields, order and defaults).

    A frozen dataclass's `__init__` sets each field through `object.__setattr__`; this one stores them
    into a plain slotted class of the same layout (ordinary attribute stores) and then gives the object
    the class `cls`. For builders of 100,000s of records (capture, load); no `__post_init__` runs.
    """
    names = [f.name for f in fields(cls)]
    if tuple(names) != tuple(cls.__slots__) or getattr(cls, "__post_init__", None) is not None:
        raise TypeError(f"{cls.__name__} is not a slotted dataclass without __post_init__")
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_missing": MISSING,
                             "_fill": type(f"_{cls.__name__}Fill", (), {"__slots__": cls.__slots__})}
    params, body = [], []
    for f in fields(cls):
        if f.default is not MISSING:
            scope[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not MISSING:
            scope[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_missing")
            body.append(f" if {f.name} is _missing: {f.name} = _f_{f.name}()\n")
        else:
            params.append(f.name)
    source = (f"def make({', '.join(params)}):\n" + "".join(body) + " o = _new(_fill)\n"
              + "".join(f" o.{n} = {n}\n" for n in names) + " o.__class__ = _cls\n return o\n")
    exec(source, scope)  # noqa: S102 - generated from the dataclass's own field names
    make = scope["make"]
    make.__doc__ = f"A new {cls.__name__} (fields as its constructor's)."
    return make


# Kinds of the synthetic ops that frame the graph.
INPUT_KIND = "input"
OUTPUT_KIND = "output"
CONSTANT_KIND = "constant"
COLLECTIVE_KIND = "collective"


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape, dtype, device and grad flag of one tensor (dtype/device as torch prints them)."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class Edge:
    """A data edge into an op: the producing op's label and where it entered the call.

    `position` is the argument path in the call: "0", "1.2" (third item of the second
    argument), or a keyword name such as "bias".
    """

    source: str
    position: str


@dataclass(frozen=True, slots=True)
class SourceSite:
    """The line of model code that made a call."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """How an op's output (a DTensor) lies on a device mesh; the op's `out` is this rank's local shard."""

    global_shape: tuple[int, ...]
    local_shape: tuple[int, ...]  # this rank's shard
    placements: tuple[str, ...]  # one per mesh dimension: "Shard(0)", "Replicate()", "Partial(sum)"
    mesh_shape: tuple[int, ...]
    mesh_dims: tuple[str, ...] = ()  # the mesh's dimension names ("tp", "dp"), when it has them
    mesh_ranks: tuple[int, ...] = ()  # every rank of the mesh, row-major


@dataclass(frozen=True, slots=True)
class Collective:
    """The communication an op is: which collective, among which ranks, and the bytes it moves.

    `payload_bytes` is what this rank hands to the collective (its input); `wire_bytes` what a ring
    algorithm sends from this rank (an estimate: the backend may choose another algorithm).
    """

    name: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast
    api: str  # "funcol" (torch.distributed._functional_collectives, DTensor) or "c10d" (torch.distributed.*)
    group: tuple[int, ...]  # global ranks of the process group
    payload_bytes: int
    wire_bytes: int
    reduce_op: str = ""
    estimated: bool = False  # True when no collective ran (a simulated mesh): every byte is an estimate

    @property
    def size(self) -> int:
        return len(self.group)


class ModuleStack:
    """The enclosing module calls at an op, outermost first: a sequence of `(address, call)` pairs.

    Each stack shares its outer part with its parent (one link per module call), so entering a
    module costs one small object whatever the depth; it reads, compares and hashes like the
    tuple of its pairs (`tuple(stack)` makes that tuple).
    """

    __slots__ = ("parent", "entry", "depth", "_tuple", "_hash")

    def __init__(self, parent: "ModuleStack | None" = None, entry: tuple[str, int] | None = None) -> None:
        self.parent = parent if entry is not None else None
        self.entry = entry
        self.depth = (parent.depth + 1 if parent is not None else 1) if entry is not None else 0
        self._tuple: tuple[tuple[str, int], ...] | None = None
        self._hash: int | None = None

    def push(self, address: str, call: int) -> "ModuleStack":
        """This stack with one more module call inside it."""
        return ModuleStack(self, (address, call))

    def as_tuple(self) -> tuple[tuple[str, int], ...]:
        """The pairs as a tuple (made once, on first use)."""
        if self._tuple is None:
            pairs = []
            node: ModuleStack | None = self
            while node is not None and node.entry is not None:
                if node._tuple is not None:  # an outer stack already made: reuse its tuple
                    pairs.extend(reversed(node._tuple))
                    break
                pairs.append(node.entry)
                node = node.parent
            pairs.reverse()
            self._tuple = tuple(pairs)
        return self._tuple

    def __len__(self) -> int:
        return self.depth

    def __bool__(self) -> bool:
        return self.depth > 0

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.as_tuple())

    def __reversed__(self) -> Iterator[tuple[str, int]]:
        node: ModuleStack | None = self
        while node is not None and node.entry is not None:
            yield node.entry
            node = node.parent

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int) and -self.depth <= index < 0 and self._tuple is None:
            node = self
            for _ in range(-index - 1):
                node = node.parent  # type: ignore[assignment]
            return node.entry
        return self.as_tuple()[index]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, ModuleStack):
            a: ModuleStack | None = self
            b: ModuleStack | None = other
            while a is not b:  # walk both chains (no recursion at any depth)
                if a is None or b is None or a.depth != b.depth or a.entry != b.entry:
                    return False
                a, b = a.parent, b.parent
            return True
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.as_tuple())
        return self._hash

    def __repr__(self) -> str:
        return repr(self.as_tuple())


EMPTY_STACK = ModuleStack()


@dataclass(frozen=True, slots=True)
class Op:
    """One tensor produced by one call (a multi-output call gives one Op per output).

    `module` is the innermost module address ("" is the root model) and `module_call`
    its call index (0 for the first call). `module_stack` holds every enclosing
    (address, call) pair from outermost to innermost. `params` are the parameter and
    buffer addresses the call read; `buffer_writes` the buffers it changed.
    """

    index: int
    label: str
    kind: str
    func: str
    parents: tuple[Edge, ...]
    out: TensorMeta | None
    func_call_id: int
    output_index: int = 0
    num_outputs: int = 1
    module: str = ""
    module_call: int = 0
    module_stack: tuple[tuple[str, int], ...] = ()  # a capture stores a ModuleStack (reads like this tuple); a file this tuple
    params: tuple[str, ...] = ()
    buffer_writes: tuple[str, ...] = ()
    inplace: bool = False
    source: SourceSite | None = None
    io_path: str = ""  # input/output ops: where in the inputs or output object the tensor sits
    attrs: Mapping[str, Any] = field(default_factory=dict)
    # Distributed captures only (absent from other traces and from files written before them):
    layout: ShardLayout | None = None  # the output's DTensor layout; `out` is then the local shard
    collective: Collective | None = None  # set on ops of kind "collective"
    rank: int | None = None  # the global rank that ran the op (set on a gathered, all-rank trace)

    @property
    def module_address(self) -> str:
        """The innermost module with its call index when it ran more than once: `h.0.attn:1`."""
        return f"{self.module}:{self.module_call}" if self.module_call else self.module


_LABEL = Op.__dict__["label"].__get__  # the slot read, without a Python frame
new_op = fast_constructor(Op)  # Op(...) for builders of many ops
new_edge = fast_constructor(Edge)


@dataclass(frozen=True, slots=True)
class ParamRecord:
    """One parameter or buffer, by its first address; `tied` lists its other addresses."""

    address: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    is_buffer: bool = False
    tied: tuple[str, ...] = ()
    layout: ShardLayout | None = None  # a DTensor parameter: its mesh and placements; `shape` is the global shape

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class ModuleCallRecord:
    """One call of a module: the ops that fed it and the ops its output was made of."""

    call: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    first_op: int  # index of the first op recorded inside the call (-1 if none)
    last_op: int


@dataclass(frozen=True, slots=True)
class ModuleScope:
    """A module in the model: address, class, its own params (local names), children, calls."""

    address: str
    class_name: str
    params: tuple[str, ...]  # full addresses of the params/buffers registered directly on it
    children: tuple[str, ...]
    calls: tuple[ModuleCallRecord, ...] = ()
    training: bool = False

    @property
    def name(self) -> str:
        return self.address.rsplit(".", 1)[-1] if self.address else ""


# Fast constructors for the builders (capture, load): the same records at a fraction of a frozen __init__'s cost.
new_param = fast_constructor(ParamRecord)
new_module_call = fast_constructor(ModuleCallRecord)
new_module_scope = fast_constructor(ModuleScope)
new_site = fast_constructor(SourceSite)
new_meta = fast_constructor(TensorMeta)


class OpSlice(tuple):
    """Ops taken from a trace (`Trace.ops_in`, `trace[i:j]`): a tuple of `Op`s that keeps the trace's ladder.

    A slice of a structure-only trace reads HYPOTHESIS (or what a discharge minted for that trace), never
    more than the trace it came from; `ladder()` is the state with its evidence (as the agent JSON's).
    """

    def __new__(cls, ops: Iterable[Op], trace: "Trace") -> "OpSlice":
        made = super().__new__(cls, ops)
        made.trace = trace
        return made

    def __getitem__(self, key: Any) -> Any:
        got = tuple.__getitem__(self, key)
        return OpSlice(got, self.trace) if isinstance(key, slice) else got

    @property
    def ladder_state(self) -> str:
        return self.trace.ladder_state

    @property
    def structure_only(self) -> bool:
        return self.trace.structure_only

    def ladder(self) -> dict[str, Any]:
        """The source trace's ladder state, wording and evidence (tracer.agent_json.ladder_json)."""
        from .agent_json import ladder_json

        return ladder_json(self.trace)


@dataclass(slots=True)
class Trace:
    """A captured forward pass: ops in execution order, modules, params, and optional values.

    `values` maps op labels to saved tensors (absent for labels not saved). `output` is
    the model's own return object when the trace came from a live capture. A trace is built
    once: `provenance` (typed, frozen) and `envelope` are set at construction, and the
    `with_*` methods return a new trace rather than changing this one.
    """

    ops: tuple[Op, ...]
    modules: dict[str, ModuleScope]
    params: dict[str, ParamRecord]
    model_class: str
    provenance: Provenance = field(default_factory=Provenance)
    values: dict[str, Any] = field(default_factory=dict)
    envelope: Any = None  # tracer.claims.EvidenceEnvelope for structure-only traces
    output: Any = None
    warnings: tuple[str, ...] = ()
    backward: Any = None  # tracer.backward.BackwardPass when captured with CaptureOptions(backward=True)
    # label -> (func, args, kwargs) of the live call that produced it; only on a trace
    # captured in this process (never saved), for replay validation.
    live_calls: dict[str, tuple] = field(default_factory=dict, repr=False)
    _by_label: dict[str, Op] = field(default_factory=dict, repr=False)
    _children: dict[str, tuple[str, ...]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.provenance, Provenance):  # a plain mapping, as saved
            self.provenance = Provenance.from_dict(self.provenance)
        self._by_label = dict(zip(map(_LABEL, self.ops), self.ops))  # one pass at C speed

    def with_provenance(self, **changes: Any) -> "Trace":
        """A new trace sharing this one's graph and values, its provenance with `changes`."""
        return replace(self, provenance=self.provenance.replace(**changes), _children=None)

    def with_envelope(self, envelope: Any) -> "Trace":
        """A new trace sharing this one's graph and values, carrying `envelope` (e.g. a discharge's).

        Refuses, typed, an envelope whose claims are not this trace's, one changed after it was sealed, and
        one stating CORROBORATED or REFUTED that `discharge_against` did not mint for this trace.
        """
        from .claims.seal import check_attachable

        check_attachable(self, envelope)
        return replace(self, envelope=envelope, _children=None)

    # -- access -------------------------------------------------------------
    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, int):
            return self.ops[key]
        if isinstance(key, slice):  # ops in execution order, keeping the ladder
            return OpSlice(self.ops[key], self)
        try:
            return self._by_label[key]
        except KeyError:
            raise KeyError(f"no op labelled {key!r} in this trace") from None

    def __contains__(self, label: object) -> bool:
        return label in self._by_label

    @property
    def inputs(self) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.kind == INPUT_KIND)

    @property
    def outputs(self) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.kind == OUTPUT_KIND)

    def children_of(self, label: str) -> tuple[str, ...]:
        """Labels of the ops that consume `label`'s output, in execution order."""
        if self._children is None:
            kids: dict[str, list[str]] = {op.label: [] for op in self.ops}
            for op in self.ops:
                for edge in op.parents:
                    kids[edge.source].append(op.label)
            self._children = {k: tuple(v) for k, v in kids.items()}
        return self._children.get(label, ())

    def ops_in(self, address: str, call: int | None = None) -> OpSlice:
        """Ops executed inside module `address` (and its submodules), optionally one call; the slice keeps the ladder."""
        found = []
        for op in self.ops:
            for addr, c in op.module_stack:
                if addr == address and (call is None or c == call):
                    found.append(op)
                    break
        return OpSlice(found, self)

    def module(self, address: str) -> ModuleScope:
        try:
            return self.modules[address]
        except KeyError:
            raise KeyError(f"no module at {address!r} in this trace") from None

    @property
    def num_edges(self) -> int:
        return sum(len(op.parents) for op in self.ops)

    @property
    def structure_only(self) -> bool:
        return self.provenance.structure_only

    @property
    def ladder_state(self) -> str:
        """OBSERVED for an eager trace; for a structure-only one HYPOTHESIS, or the CORROBORATED or REFUTED
        that a discharge minted for this trace's structure (`tracer.claims.seal.believed_state`)."""
        env = self.envelope
        if env is None:
            return "HYPOTHESIS" if self.provenance.structure_only else "OBSERVED"
        state = env.ladder_state
        if type(state) is str and state == "HYPOTHESIS":
            return state
        from .claims.seal import believed_state

        return believed_state(self)

    def param_count(self, count_tied_once: bool = True) -> int:
        total = 0
        for rec in self.params.values():
            if rec.is_buffer:
                continue
            total += rec.numel if count_tied_once else rec.numel * (1 + len(rec.tied))
        return total

    def kind_counts(self) -> Counter:
        return Counter(op.kind for op in self.ops)

    # -- conversions ----------------------------------------------------------
    def to_networkx(self):
        """A `networkx.MultiDiGraph` with one node per op (attrs from the Op) and data edges; the graph's
        attributes carry the ladder (`ladder_state`, `structure_only`, and `ladder`: state, wording, evidence)."""
        import networkx as nx

        from .agent_json import ladder_json

        g = nx.MultiDiGraph(model_class=self.model_class, ladder_state=self.ladder_state,
                            structure_only=self.structure_only, ladder=ladder_json(self))
        for op in self.ops:
            g.add_node(
                op.label, index=op.index, kind=op.kind, func=op.func, module=op.module,
                module_call=op.module_call,
                shape=op.out.shape if op.out else None, dtype=op.out.dtype if op.out else None,
                params=op.params,
            )
        for op in self.ops:
            for edge in op.parents:
                g.add_edge(edge.source, op.label, position=edge.position)
        return g

    def summary(self, **kwargs: Any) -> str:
        from .module_tree import render_summary

        return render_summary(self, **kwargs)

    def discharge_against(self, real: "Trace") -> Any:
        """Compare this structure-only trace's claims with a real capture (see tracer.claims).

        Returns a `DischargeResult` whose `envelope` is the new one: `self.with_envelope(result.envelope)`.
        """
        from .claims import discharge

        return discharge(self, real)

    def check_plan(self, plan: list) -> Any:
        """Audit planned interventions `[(site, meta_tensor), ...]` against this trace (never executes; returns the report)."""
        from .claims import check_plan

        return check_plan(self, plan)

    def to_html(self, path: Any, **options: Any) -> Any:
        """Write the self-contained explorer page (no server, no network) to `path`; returns the path."""
        from .frontends import view

        return view("html")(self, path, **options)

    def _repr_html_(self) -> str | None:
        from .frontends import html_repr

        return html_repr(self)

    def save(self, path: Any) -> Any:
        """Write this trace to folder `path` (trace.json + values.safetensors, + grads.safetensors with a backward); returns the folder."""
        from .store import save_trace

        return save_trace(self, path)

    def __repr__(self) -> str:
        n_params = self.param_count()
        saved = f", {len(self.values)} values saved" if self.values else ""
        return (
            f"<Trace {self.model_class}: {len(self.ops)} ops, {self.num_edges} edges, "
            f"{len(self.modules)} modules, {n_params:,} params{saved}; {self.ladder_state}>"
        )

    # -- agent and figure surfaces (tracer.agent_json; the `draw` view) -------------------------
    def to_agent_json(self, *, ops: bool = True, fold: bool = True, doctor: Any = None,
                      max_ops: int | None = None) -> dict[str, Any]:
        """This trace as plain JSON for coding agents (schema `torchlens-explore.agent/1`, docs/agent.md);
        `max_ops` keeps the first ops in execution order and says how many were left out (`ops_omitted`)."""
        from .agent_json import agent_json

        return agent_json(self, ops=ops, fold=fold, doctor=doctor, max_ops=max_ops)

    def draw(self, path: Any = None, **options: Any) -> Any:
        """The figure of the default view with the ladder caption: the SVG text, or written to `path`
        (.svg or .png; returns the path). Options as `exporters.figures.export_svg`'s."""
        from .frontends import draw

        return draw(self, path, **options)
