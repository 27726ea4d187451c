"""The edge check of `validate`: perturb each recorded parent and see whether the op's output moves.

An unchanged output is evidence of a capture defect only when some change of the argument could
have moved it. Each edge is tried with noise, then with threshold-crossing changes (constant fills,
large values of both signs, a sign flip, a permutation, the value it is compared with), and integer
indices with other in-range values. An edge none of these moves is classified, never failed, when
its argument cannot carry data in this forward: the kernel table declares it shape-only, the
kernel overwrites every element of it, it indexes a dimension of size 1 or a uniform operand, it
is an integer or boolean argument (index, mask, count) of a piecewise-constant choice, it is the
unselected branch of a mask, or the kernel rejects every changed value of it. Only a floating
argument of a kernel that reads it, whose every change is accepted and leaves the output as it
was, fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch

from ..ir import Edge, Op
from .batch import NARROW_FLOATS, nested_parts, same
from .interpreter import INDEXING_KINDS, ReplayError, dependence_declared_absent, is_piecewise_constant
from .received import ReceivingReplayer


@dataclass
class Baseline:
    """What a perturbed replay of one op is compared with: a replay in the same grad mode, and its tolerance."""

    value: torch.Tensor
    grad: bool = False
    atol: float = 0.0
    random: bool = False  # varies between replays beyond rounding: never perturbed


@dataclass(frozen=True)
class EdgeVerdict:
    """The outcome for one recorded edge: 'carries', 'excused', 'not_perturbable' or 'fails'."""

    outcome: str
    op: Op
    position: str
    source: str
    why: str = ""


def check_edges(replayer: ReceivingReplayer, ops: list[Op], gen: torch.Generator,
                baselines: dict[str, Baseline]) -> Iterator[EdgeVerdict]:
    """One verdict per recorded parent of the call whose outputs are `ops`."""
    for edge in ops[0].parents:
        yield check_edge(replayer, ops, edge, gen, baselines)


def check_edge(replayer: ReceivingReplayer, ops: list[Op], edge: Edge, gen: torch.Generator,
               baselines: dict[str, Baseline]) -> EdgeVerdict:
    """The verdict for one recorded parent of the call whose outputs are `ops`."""
    position = edge.position
    needing = [op for op in ops if not dependence_declared_absent(op, position) and op.label in replayer.values]
    random = [op for op in needing if op.label in baselines and baselines[op.label].random]
    needing = [op for op in needing if op not in random]
    parent = replayer.parent_value(ops[0], edge)
    why = ("the op varies between replays like a random kernel" if random else
           "declared shape-only in the kernel table") if not needing else (
        "the parent is empty: it holds no values to carry" if parent.numel() == 0 else
        "the output is empty: it holds no values to change" if all(_empty_output(op) for op in needing)
        else None)
    needing = [op for op in needing if not _empty_output(op)]  # an empty output (split's [8, 0]) cannot change
    if why:
        return EdgeVerdict("excused", ops[0], position, edge.source, why)
    trial = _Trial(replayer, needing, position, baselines)
    trial.run(_perturbations(parent, gen))
    if trial.unchanged:  # nothing moved the output: try the strong perturbations (swaps, fills, large, sign)
        trial.run(_strong_perturbations(parent, gen))
    if trial.unchanged and trial.unchanged[0].kind in _COMPARISON_KINDS:  # take the value it is compared with
        trial.run(_compared_values(replayer, trial.unchanged[0], position, parent))
    index = not _float(parent) and parent.dtype != torch.bool
    bound = _index_bound(replayer, trial.unchanged[0], position) if trial.unchanged and index else None
    if trial.unchanged and bound is not None and bound > 1:
        trial.run(_in_range(parent, bound, gen))  # other valid indices
    if not trial.unchanged:
        return EdgeVerdict("carries", ops[0], position, edge.source)
    op = trial.unchanged[0]
    excuse = _indexes_uniform_operand(replayer, op, position, parent)
    if excuse:
        return EdgeVerdict("excused", op, position, edge.source, "indices into an operand that holds one value everywhere")
    why = _not_perturbable(replayer, op, edge, parent, bound, trial.accepted)
    if why:
        return EdgeVerdict("not_perturbable", op, position, edge.source, why)
    return EdgeVerdict("fails", op, position, edge.source,
                       f"perturbing parent {edge.source} (argument {position}) left the output unchanged: "
                       "the recorded edge carries no data")


def _not_perturbable(replayer: ReceivingReplayer, op: Op, edge: Edge, parent: torch.Tensor, bound: int | None,
                     accepted: bool) -> str | None:
    """Why no change of this argument can move the output in this forward, or None (then the edge fails)."""
    position = edge.position
    if _no_finite_value(replayer.values.get(op.label)):
        return ("not perturbable: the output holds no finite value in this forward (NaN or infinite "
                "everywhere), so no change of an input can be seen in it")
    if bound == 1 or _indexes_a_single_position(replayer, op, position, parent):
        return "not perturbable: indices into a dimension of size 1: the only valid index is 0"
    if accepted and op.kind in OVERWRITING_KINDS and position in _DESTINATION_POSITIONS:
        return (f"not perturbable: {op.kind} overwrites every element of this destination in this forward "
                "(constant fills of it and large values of both signs left the output unchanged)")
    if is_piecewise_constant(op):
        return _piecewise_reason(op, edge.source)
    why = _unselected_branch(replayer, op, position)
    if why:
        return why
    if not accepted:
        return ("not perturbable: the kernel rejects every changed value of this argument (a size or value "
                "the other arguments fix), so its values are read")
    if not _float(parent):
        what = f"an index into a dimension of size {bound}" if bound else "an integer or boolean argument"
        return (f"not perturbable: {what} (index, mask or count) of a piecewise-constant choice; none of its "
                "changes (other in-range values, swaps, flips, fills) moved the output in this forward")
    return None


class _Trial:
    """Replays `ops` with candidates at `position`; keeps the ops no candidate changed."""

    def __init__(self, replayer: ReceivingReplayer, ops: list[Op], position: str,
                 baselines: dict[str, Baseline]) -> None:
        self.replayer, self.unchanged, self.position, self.baselines = replayer, list(ops), position, baselines
        self.accepted = False  # some candidate ran without the kernel rejecting it

    def run(self, candidates: Iterable[torch.Tensor]) -> None:
        for candidate in candidates:
            if not self.unchanged:
                return
            still = []
            for op in self.unchanged:
                base = self.baselines.get(op.label)
                try:
                    got = self.replayer.run(op, {self.position: candidate}, grad=base.grad if base else False)
                except ReplayError:
                    still.append(op)  # this perturbation is outside the kernel's domain; try another
                    continue
                self.accepted = True
                if not changed(self.replayer, op, got, self.baselines):
                    still.append(op)
            self.unchanged = still


def changed(replayer: ReceivingReplayer, op: Op, got: Any, baselines: dict[str, Baseline]) -> bool:
    """Whether a replay's output differs from the op's baseline (beyond its disclosed tolerance)."""
    if got is None:
        return False
    base = baselines.get(op.label)
    if base is None:
        return not same(got, replayer.values[op.label])
    if base.atol == 0.0:
        return not same(got, base.value)
    return max_abs(got, base.value) > base.atol


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference (inf for other shapes or unequal integers; both NaN counts as 0)."""
    if a.shape != b.shape:
        return float("inf")
    if a.is_nested or b.is_nested:
        pa, pb = nested_parts(a), nested_parts(b)
        if len(pa) != len(pb):
            return float("inf")
        return max((max_abs(x, y) for x, y in zip(pa, pb)), default=0.0)
    if not (a.is_floating_point() or a.is_complex()):
        return 0.0 if torch.equal(a, b) else float("inf")
    d = (a.detach().to(torch.complex128 if a.is_complex() else torch.float64)
         - b.detach().to(torch.complex128 if b.is_complex() else torch.float64)).abs()
    both_nan = a.isnan() & b.isnan()
    d = d.masked_fill(both_nan, 0.0)
    return float(d.max()) if d.numel() else 0.0


# Kernels that write the values of another argument over their destination (argument 0): when
# fills of the destination leave the output unchanged, the write covers every element of it.
OVERWRITING_KINDS = frozenset({
    "setitem", "copy_", "index_put", "index_put_", "index_copy", "index_copy_", "index_fill", "index_fill_",
    "scatter", "scatter_", "scatter_reduce", "scatter_reduce_", "masked_fill", "masked_fill_", "masked_scatter",
    "masked_scatter_", "fill_", "zero_", "put", "put_", "slice_scatter", "select_scatter", "diagonal_scatter",
})
_DESTINATION_POSITIONS = frozenset({"0", "self", "input"})

# Kernels that pick each element from one argument or another by a mask:
# kind -> (mask positions, {branch position: the mask value that selects it}).
_SELECTIONS = {
    "where": (("0", "condition"), {"1": True, "input": True, "self": True, "2": False, "other": False}),
    "masked_fill": (("1", "mask"), {"2": True, "value": True}),
    "masked_fill_": (("1", "mask"), {"2": True, "value": True}),
}


def _call_value(replayer: ReceivingReplayer, op: Op, position: str) -> Any:
    """What `op` was called with at `position`: a parent's value, else the recorded argument (None if absent)."""
    edge = next((e for e in op.parents if e.position == position), None)
    if edge is not None:
        return replayer.parent_value(op, edge)
    _func, args, kwargs = replayer.call_of(op)
    head, _, item = position.partition(".")
    if not head.isdigit():
        return kwargs.get(head)
    if int(head) >= len(args):
        return None
    value = args[int(head)]
    if item:
        return value[int(item)] if isinstance(value, (list, tuple)) and int(item) < len(value) else None
    return value


def _unselected_branch(replayer: ReceivingReplayer, op: Op, position: str) -> str | None:
    """Why a selection kernel's branch at `position` carries no data here: its mask never selects it."""
    spec = _SELECTIONS.get(op.kind)
    if spec is None or position not in spec[1]:
        return None
    mask_positions, branches = spec
    mask = next((m for m in (_call_value(replayer, op, p) for p in mask_positions) if isinstance(m, torch.Tensor)),
                None)
    if mask is None or mask.dtype != torch.bool or bool((mask == branches[position]).any()):
        return None
    return (f"not perturbable: {op.kind} selects this argument where its mask is {branches[position]}, "
            "and the mask is nowhere so in this forward (a piecewise-constant choice, proven on the mask's edge)")


# Comparisons: an edge is proven by giving the argument the very value it is compared with.
_COMPARISON_KINDS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isclose", "maximum", "minimum", "fmax", "fmin"})


def _compared_values(replayer: ReceivingReplayer, op: Op, position: str, t: torch.Tensor) -> Iterator[torch.Tensor]:
    """Copies of `t` holding the other operand's values (and one step either side, for integers)."""
    _func, args, kwargs = replayer.call_of(op)
    edges = {e.position: replayer.parent_value(op, e) for e in op.parents}
    others = [v for i, v in enumerate(args) if str(i) != position] + [v for k, v in kwargs.items() if k != position]
    others += [v for pos, v in edges.items() if pos != position]
    for other in others:
        if isinstance(other, torch.Tensor):
            try:
                base = other.detach().to(t.dtype).expand_as(t)
            except (RuntimeError, TypeError):
                continue
            candidates = [base] + ([base + 1, base - 1] if not (t.is_floating_point() or t.dtype == torch.bool) else [])
            for c in candidates:
                p = t.clone()
                p.copy_(c)
                yield p
        elif isinstance(other, (int, float)) and not isinstance(other, bool):
            steps = (0,) if t.is_floating_point() else (0, 1, -1)
            for step in steps:
                try:
                    yield _filled(t, other + step)
                except (RuntimeError, OverflowError):
                    continue


def _piecewise_reason(op: Op, source: str) -> str:
    what = (f"its {op.out.dtype} output" if op.out is not None and not _float_dtype(op.out.dtype)
            else f"{op.kind} rounds or thresholds its input, so its output")
    return (f"not perturbable: {what} is piecewise constant, and none of the perturbations of {source} "
            "(noise, sign flip, large values of both signs, constant fills, a permutation, the value it is "
            "compared with) crossed a step in this forward")


def _float_dtype(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def _float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _no_finite_value(value: Any) -> bool:
    """True for a non-empty floating tensor none of whose elements is finite (a forward that overflowed)."""
    if not isinstance(value, torch.Tensor) or value.is_nested or value.layout != torch.strided \
            or not _float(value) or value.numel() == 0:
        return False
    return not bool(torch.isfinite(value.to(torch.float32) if value.element_size() == 1 else value).any())  # fp8


def _indexes_uniform_operand(replayer: ReceivingReplayer, op: Op, position: str, parent: torch.Tensor) -> bool:
    """Kernel-table excuse: an index argument into a tensor whose elements are all equal."""
    if op.kind not in INDEXING_KINDS or _float(parent) or parent.dtype == torch.bool:
        return False
    _func, args, kwargs = replayer.call_of(op)
    positions = {e.position: replayer.parent_value(op, e) for e in op.parents}
    others = [positions.get(pos, t) for pos, t in call_tensors(args, kwargs) if pos != position]
    return bool(others) and all(t.numel() > 0 and bool((t == t.reshape(-1)[0]).all()) for t in others)


def _empty_output(op: Op) -> bool:
    return op.out is not None and op.out.numel == 0


def _indexes_a_single_position(replayer: ReceivingReplayer, op: Op, position: str, parent: torch.Tensor) -> bool:
    """An integer index tensor at `x[..., idx, ...]` (getitem position "1.k") into a dimension of size 1."""
    if op.kind != "getitem" or _float(parent) or parent.dtype == torch.bool:
        return False
    return _subscript_bound(replayer, op, position) == 1


def _subscript_bound(replayer: ReceivingReplayer, op: Op, position: str) -> int | None:
    """The size of the dimension an index tensor in `x[...]` / `x[...] = v` (position "1" or "1.k") indexes."""
    head, _, k = position.partition(".")
    if head != "1":
        return None
    source = _call_value(replayer, op, "0")
    if not isinstance(source, torch.Tensor) or source.dim() == 0:
        return None
    if not k:
        return int(source.shape[0])
    if not k.isdigit():
        return None
    _func, args, _kwargs = replayer.call_of(op)
    index = args[1] if len(args) > 1 else None
    if not isinstance(index, (tuple, list)) or any(i is None or i is Ellipsis or
                                                   (isinstance(i, torch.Tensor) and i.dtype == torch.bool)
                                                   for i in index[:int(k)]):
        return None  # the indexed dimension is not simply the k-th
    return int(source.shape[int(k)]) if int(k) < source.dim() else None


# Kernels that read an integer argument as indices along `dim` of their argument 0:
# kind -> (index positions, dim position, dim keyword).
_DIM_INDEXED = {
    **{k: (("2", "index"), 1, "dim") for k in ("gather", "index_select", "scatter", "scatter_", "scatter_add",
                                               "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_add",
                                               "index_add_", "index_copy", "index_copy_", "index_fill",
                                               "index_fill_")},
    "take_along_dim": (("1", "indices"), 2, "dim"),
}


def _index_bound(replayer: ReceivingReplayer, op: Op, position: str) -> int | None:
    """How many valid values an integer index argument at `position` has (the size it indexes), if known."""
    try:
        if op.kind in ("getitem", "setitem", "index", "index_put", "index_put_"):
            return _subscript_bound(replayer, op, position)
        if op.kind == "embedding":  # F.embedding(input, weight) or torch.embedding(weight, input)
            tables = [t for t in (_call_value(replayer, op, p) for p in ("0", "1", "weight"))
                      if isinstance(t, torch.Tensor) and _float(t)]
            return int(tables[0].shape[0]) if tables else None
        if op.kind == "take":
            source = _call_value(replayer, op, "0")
            return source.numel() if isinstance(source, torch.Tensor) else None
        spec = _DIM_INDEXED.get(op.kind)
        if spec is None or position not in spec[0]:
            return None
        source = _call_value(replayer, op, "0")
        dim = _call_value(replayer, op, str(spec[1]))
        dim = _call_value(replayer, op, spec[2]) if dim is None else dim
        if not isinstance(source, torch.Tensor) or not isinstance(dim, int) or source.dim() == 0:
            return None
        return int(source.shape[dim])
    except Exception:  # an unusual call: no bound, the generic perturbations stand
        return None


def _in_range(t: torch.Tensor, bound: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Copies of an index tensor `t` holding other valid indices in [0, bound)."""
    if t.numel() == 0 or t.dtype == torch.bool:
        return
    yield (t + 1).remainder(bound).to(t.dtype)
    yield (t - 1).remainder(bound).to(t.dtype)
    for _ in range(2):
        yield torch.randint(0, bound, t.shape, generator=gen).to(dtype=t.dtype, device=t.device)


def call_tensors(args: tuple, kwargs: dict) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of a call with its position ("i", "i.j" inside a list argument, or the keyword)."""
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            yield str(i), a
        elif type(a) in (list, tuple) and a and isinstance(a[0], torch.Tensor):
            for j, b in enumerate(a):
                if isinstance(b, torch.Tensor):
                    yield f"{i}.{j}", b
    for k, a in kwargs.items():
        if isinstance(a, torch.Tensor):
            yield k, a


def _first_element_set(t: torch.Tensor, value: Any) -> torch.Tensor:
    """A copy of `t` (same strides) with its first element set to `value`."""
    p = t.clone()
    p[(0,) * t.dim()] = value
    return p


def _stood_in(perturb: Any) -> Any:
    """`perturb` for tensors torch computes nothing on directly: a narrow float (fp8) is perturbed in float32
    and cast back into a copy of it; a jagged nested tensor by its values, rewrapped on the same offsets
    (so it keeps its ragged dimension)."""
    def wrapped(t: torch.Tensor, gen: torch.Generator) -> Iterator[torch.Tensor]:
        if t.is_nested and t.layout == torch.jagged:
            offsets, lengths = t.offsets(), t.lengths()
            for v in wrapped(t.values(), gen):
                yield torch.nested.nested_tensor_from_jagged(v, offsets, lengths=lengths)
            return
        if t.dtype in NARROW_FLOATS:
            for wide in perturb(t.float(), gen):
                p = t.clone()
                p.copy_(wide)
                yield p
            return
        yield from perturb(t, gen)
    wrapped.__doc__ = perturb.__doc__
    return wrapped


@_stood_in
def _perturbations(t: torch.Tensor, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Changed copies of `t`, strongest first; each keeps shape, dtype, device and strides."""
    if t.numel() == 0:
        return
    if t.dtype == torch.bool:
        yield ~t
        return
    if t.is_floating_point() or t.is_complex():
        noise = torch.randn(t.shape, generator=gen, dtype=torch.float32).to(dtype=t.dtype, device=t.device)
        p = t.clone()
        p.add_(noise)
        yield p
        yield t.neg() + noise
        yield _first_element_set(t, float("inf") if t.is_floating_point() else complex(float("inf"), 0))
        return
    yield t ^ 1
    yield (t - 1).clamp_min(0)
    yield t.flip(tuple(range(t.dim())))


@_stood_in
def _strong_perturbations(t: torch.Tensor, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Perturbations that cross thresholds: constant fills, large values of both signs, a sign flip, swaps."""
    if t.numel() == 0:
        return
    if t.dtype == torch.bool:
        for fill in (True, False):
            yield _filled(t, fill)
        if t.numel() > 1:
            yield _permuted(t, gen)
        return
    if t.is_floating_point() or t.is_complex():
        big = min(1e4, float(torch.finfo(t.dtype).max) / 4) if t.is_floating_point() else 1e4
        fills: tuple = (0, 1, -1, big, -big)
    else:
        info = torch.iinfo(t.dtype)
        big = min(1 << 20, info.max // 4)
        fills = (0, 1, big) + ((-1, -big) if info.min < 0 else ())
    for fill in fills:
        yield _filled(t, fill)
    if t.dtype != torch.uint8:
        yield t.neg() if (t.is_floating_point() or t.is_complex() or torch.iinfo(t.dtype).min < 0) else t
    yield _shifted(t, big)
    if t.numel() > 1:
        yield _permuted(t, gen)


def _filled(t: torch.Tensor, value: Any) -> torch.Tensor:
    p = t.clone()
    p.fill_(value)
    return p


def _shifted(t: torch.Tensor, amount: Any) -> torch.Tensor:
    p = t.clone()
    p.add_(amount)
    return p


def _permuted(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A copy of `t` (same strides) with its elements in another order (a roll when all orders agree)."""
    flat = t.reshape(-1)
    order = torch.randperm(flat.numel(), generator=gen).to(t.device)
    p = t.clone()
    p.copy_(flat[order].reshape(t.shape))
    if torch.equal(p, t):
        p.copy_(flat.roll(1).reshape(t.shape))
    return p
