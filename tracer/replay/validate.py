"""`validate(trace)`: replay every op, perturb every edge, check the trace's invariants.

Three checks, in this order:
1. metadata invariants (edges point backwards, saved values match their metadata, every
   consumed parameter is attributed, no tensor reaches a call unrecorded): a violation
   means the trace is not a faithful record, so it always raises `TraceInvariantError`;
2. replay: each op recomputed from its saved parents equals the recorded value bit for bit
   (random kernels, declared in the kernel table, are compared by metadata). A mismatch is
   replayed again in the capture's grad mode, then several times: a kernel whose replays
   differ among themselves is held to a tolerance derived from that spread, disclosed per op;
3. perturbation: changing a parent changes the child, except where the kernel table
   declares the dependence absent. Piecewise-constant outputs (integer or boolean results,
   rounding, comparisons) and mask-selected branches are also tried with threshold-crossing
   perturbations; when none moves them the edge is reported "not perturbable", never failed.
Checks 2 and 3 give a report; `raise_on_failure=True` raises `ReplayMismatchError`. A replay
that cannot run is a typed finding naming its op; nothing untyped leaves `validate`. A trace
loaded from a file replays from its stored call templates (see `offline`).
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from ..errors import (ReplayMismatchError, ReplayUnavailableError, StructureOnlyValidationError, TraceInvariantError,
                      TracerError, ValidationFailedError, ValidationScopeError, ValuesMissingError)
from ..ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op, Trace
from .interpreter import (INDEXING_KINDS, NotReplayable, ReplayError, Replayer, context,
                          dependence_declared_absent, is_nondeterministic, is_piecewise_constant)
from .offline import has_call_templates

_SEED = 20240606


@dataclass(frozen=True)
class Finding:
    """One failed check: the op, which check, and what was seen."""

    label: str
    index: int
    check: str  # "replay" | "edge" | "missing" | "verification" | "invariant"
    message: str


@dataclass
class ValidationReport:
    """What `validate` checked and the failures it found, first failing op first."""

    scope: str
    ops_total: int = 0
    ops_replayed: int = 0
    ops_exact: int = 0
    ops_nondeterministic: int = 0
    edges_checked: int = 0
    edges_carrying: int = 0
    edges_excused: int = 0
    findings: list[Finding] = field(default_factory=list)
    excused: list[tuple[str, str, str]] = field(default_factory=list)  # (op label, position, why)
    edges_not_perturbable: int = 0
    not_perturbable: list[tuple[str, str, str]] = field(default_factory=list)  # (op label, position, why)
    ops_within_spread: int = 0
    tolerances: dict[str, dict[str, Any]] = field(default_factory=dict)  # op label -> disclosed tolerance
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.findings

    def __bool__(self) -> bool:
        return self.passed

    @property
    def first_failing_op(self) -> str | None:
        return self.findings[0].label if self.findings else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope, "passed": self.passed, "first_failing_op": self.first_failing_op,
            "ops_total": self.ops_total, "ops_replayed": self.ops_replayed, "ops_exact": self.ops_exact,
            "ops_nondeterministic": self.ops_nondeterministic, "edges_checked": self.edges_checked,
            "edges_carrying": self.edges_carrying, "edges_excused": self.edges_excused,
            "findings": [f.__dict__ for f in self.findings[:50]], "num_findings": len(self.findings),
            "excused": [list(e) for e in self.excused[:50]],
            "edges_not_perturbable": self.edges_not_perturbable,
            "not_perturbable": [list(e) for e in self.not_perturbable[:50]],
            "ops_within_spread": self.ops_within_spread, "tolerances": dict(self.tolerances),
            "seconds": round(self.seconds, 4),
        }

    def to_text(self) -> str:
        head = "PASSED" if self.passed else f"FAILED at {self.first_failing_op}"
        lines = [
            f"validation ({self.scope}): {head}",
            f"  ops: {self.ops_replayed}/{self.ops_total} replayed, {self.ops_exact} bit-exact, "
            f"{self.ops_nondeterministic} random (metadata compared), "
            f"{self.ops_within_spread} within their replay-to-replay spread",
            f"  edges: {self.edges_checked} perturbed, {self.edges_carrying} carry data, "
            f"{self.edges_excused} excused, {self.edges_not_perturbable} not perturbable",
        ]
        for label, tol in list(self.tolerances.items())[:5]:
            lines.append(f"  tolerance {label}: max abs {tol['atol']:.3e} ({tol['why']})")
        for label, position, why in self.excused[:5]:
            lines.append(f"  excused {label} argument {position}: {why}")
        for label, position, why in self.not_perturbable[:5]:
            lines.append(f"  not perturbable {label} argument {position}: {why}")
        for f in self.findings[:10]:
            lines.append(f"  [{f.check}] {f.label}: {f.message}")
        if len(self.findings) > 10:
            lines.append(f"  ... {len(self.findings) - 10} more")
        return "\n".join(lines)


Params = Mapping[str, torch.Tensor] | nn.Module | None


def validate(trace: Trace, scope: str = "forward", *, raise_on_failure: bool = False,
             perturb: bool = True, params: Params = None) -> "ValidationReport":
    """Replay and perturb `trace`; the report is truthy when every op reproduces and every edge carries data.

    Nothing is written into the trace: the returned `ValidationReport` is the whole result. A loaded
    trace replays from its stored call templates with `params`: the model itself (every parameter and
    buffer, non-persistent ones included) or a mapping such as its state dict.
    """
    report = validation_report(trace, scope, perturb=perturb, params=params)
    if not report.passed and raise_on_failure:
        first = report.findings[0]
        raise ReplayMismatchError(
            f"validation failed at {first.label}: {first.message}", site=context(trace[first.label]),
            first_failing_op=first.label, report=report.to_dict())
    return report


def validation_report(trace: Trace, scope: str = "forward", *, perturb: bool = True,
                      params: Params = None) -> ValidationReport:
    """The full `ValidationReport` for `trace` (raises typed for traces that cannot be replayed).

    A trace loaded from a file replays from its stored call templates; `params` (a state dict)
    supplies the parameters and buffers its ops read, which a trace file does not hold.
    """
    _admit(trace, scope)
    if isinstance(params, nn.Module):
        params = model_tensors(params)
    try:
        return _report(trace, scope, perturb, params)
    except TracerError:
        raise
    except Exception as exc:  # nothing untyped leaves validate
        raise ValidationFailedError(f"validation could not run: {type(exc).__name__}: {exc}",
                                    site="validate(trace)") from exc


def _report(trace: Trace, scope: str, perturb: bool, params: Mapping[str, torch.Tensor] | None) -> ValidationReport:
    started = time.perf_counter()
    check_invariants(trace)
    report = ValidationReport(scope=scope, ops_total=len(trace.ops))
    _verification_findings(trace, report)
    replayer = Replayer(trace, params=params)
    gen = torch.Generator().manual_seed(_SEED)
    groups: dict[int, list[Op]] = defaultdict(list)
    for op in trace.ops:
        groups[op.func_call_id].append(op)
    for ops in groups.values():
        try:
            _check_call(replayer, ops, report, gen, perturb)
        except Exception as exc:  # whatever a kernel does, validation reports it and goes on
            op = ops[0]
            report.findings.append(Finding(op.label, op.index, "not_replayable",
                                           f"not replayable: {type(exc).__name__}: {exc}; {context(op)}"))
    report.findings.sort(key=lambda f: f.index)
    report.seconds = time.perf_counter() - started
    return report


# -- admission ------------------------------------------------------------------------------
def _admit(trace: Trace, scope: str) -> None:
    if scope != "forward":
        raise ValidationScopeError(f"scope {scope!r} is not replayed", site="validate(scope=...)")
    if trace.structure_only:
        raise StructureOnlyValidationError(
            "a structure-only trace has no values to replay", site="validate(trace)")
    if not trace.values:
        raise ValuesMissingError("the trace holds no saved values", site="validate(trace)")
    calls = any(op.kind not in (INPUT_KIND, OUTPUT_KIND, CONSTANT_KIND) for op in trace.ops)
    if calls and not trace.live_calls and not has_call_templates(trace):  # no call at all: nothing to replay
        raise ReplayUnavailableError(
            "the trace holds neither live calls nor stored call templates", site="validate(trace)",
            remedy="Trace the model again in this process, or save and load it with a build that stores call "
                   "templates, and pass params=model to validate.")


def _verification_findings(trace: Trace, report: ValidationReport) -> None:
    """A trace marked not verified (quantized state, capture gap) can never pass validation."""
    if trace.provenance.verified:
        return
    reasons = trace.provenance.unverified_reasons or ("the trace is marked not verified",)
    labels = [lab for lab in trace.provenance.unverified_ops if lab in trace]
    op = trace[labels[0]] if labels else trace.ops[0]
    report.findings.append(Finding(op.label, op.index, "verification", "; ".join(reasons)))


# -- replay and perturbation of one call ------------------------------------------------------
@dataclass
class _Baseline:
    """What a perturbed replay of one op is compared with: a replay in the same grad mode, and its tolerance."""

    value: torch.Tensor
    grad: bool = False
    atol: float = 0.0
    random: bool = False  # varies between replays beyond rounding: never perturbed


def _check_call(replayer: Replayer, ops: list[Op], report: ValidationReport, gen: torch.Generator,
                perturb: bool) -> None:
    first = ops[0]
    if first.kind in (INPUT_KIND, CONSTANT_KIND):
        return
    values = trace_values = replayer.values
    if first.kind == OUTPUT_KIND:
        src = first.parents[0].source if first.parents else None
        if src is not None and src in values and not _meta_ok(values[src], first):
            report.findings.append(Finding(first.label, first.index, "replay",
                                           "the output's metadata differs from the op it returns"))
        return
    missing = replayer.missing_parents(first) + [op.label for op in ops if op.label not in trace_values
                                                 and not _returns_own_argument(replayer, op)]
    if missing:
        what = ", ".join(sorted(set(missing)))
        report.findings.append(Finding(first.label, first.index, "missing", f"not replayable: {what} not saved"))
        return
    try:
        func, args, kwargs = replayer.call_of(first)
    except NotReplayable as exc:
        report.findings.append(Finding(first.label, first.index, exc.check, f"{exc}; {context(first)}"))
        return
    random = is_nondeterministic(first, args, kwargs)
    baselines: dict[str, _Baseline] = {}
    for op in ops:
        report.ops_replayed += 1
        try:
            got = replayer.run(op)
        except ReplayError as exc:
            report.findings.append(Finding(op.label, op.index, "replay", str(exc)))
            return
        want = values.get(op.label)
        if want is None:  # the op returned a parameter or buffer itself (checked above): nothing saved
            report.ops_exact += 1
            continue
        if got is None or not _meta_ok(got, op):
            report.findings.append(Finding(op.label, op.index, "replay",
                                           f"replay gave {_describe(got)}, recorded {op.out}; {context(op)}"))
            continue
        if random:
            report.ops_nondeterministic += 1
        elif _same(got, want):
            report.ops_exact += 1
        else:
            _compare_inexact(replayer, op, got, want, report, baselines)
    if perturb and not random:
        _perturb_edges(replayer, ops, report, gen, baselines)


# How many replays measure a kernel's replay-to-replay spread, and the slack on that spread.
_SPREAD_REPLAYS = 4
_SPREAD_FACTOR = 2.0
# A spread above this fraction of the output's magnitude is randomness, not rounding.
_RANDOM_SPREAD = 1e-3


def _compare_inexact(replayer: Replayer, op: Op, got: torch.Tensor, want: torch.Tensor,
                     report: ValidationReport, baselines: dict[str, _Baseline]) -> None:
    """A replay that is not bit-equal: retry in the capture's grad mode, then measure the kernel's spread.

    Kernels that choose another algorithm when autograd is recording (CPU RNNs) replay exactly
    with grad enabled, as the capture ran. A kernel whose replays differ among themselves is
    held to its own spread (disclosed per op); a deterministic kernel must stay bit-exact.
    """
    grad = False
    if op.out is not None and op.out.requires_grad:
        again = replayer.run(op, grad=True)
        if isinstance(again, torch.Tensor) and _same(again, want):
            report.ops_exact += 1
            baselines[op.label] = _Baseline(again, grad=True)
            return
        if isinstance(again, torch.Tensor) and _meta_ok(again, op):
            got, grad = again, True
    replays = [got] + [replayer.run(op, grad=grad) for _ in range(_SPREAD_REPLAYS - 1)]
    spread = max(_max_abs(r, got) for r in replays[1:])
    off = _max_abs(want, got)
    if spread > 0 and off <= _SPREAD_FACTOR * spread:
        atol = _SPREAD_FACTOR * spread
        random = spread > _RANDOM_SPREAD * max(1.0, _max_abs(got, torch.zeros_like(got)))
        if random:
            report.ops_nondeterministic += 1
            why = (f"{op.func} varies between replays beyond rounding ({_SPREAD_REPLAYS} replays differ by up to "
                   f"{spread:.3e}), like a random kernel the kernel table does not list: compared by metadata, "
                   "its edges not perturbed")
        else:
            report.ops_within_spread += 1
            why = (f"{op.func} does not replay bit for bit: {_SPREAD_REPLAYS} replays differ by up to "
                   f"{spread:.3e}; the recorded value must sit within {_SPREAD_FACTOR:g}x that")
        report.tolerances[op.label] = {"atol": atol, "spread": spread, "recorded_off_by": off,
                                       "replays": _SPREAD_REPLAYS, "random": random, "why": why}
        baselines[op.label] = _Baseline(got, grad=grad, atol=atol, random=random)
        return
    kind = ("replays differ among themselves by at most " f"{spread:.3e}" if spread > 0
            else "the kernel replays bit for bit (deterministic)")
    report.findings.append(Finding(op.label, op.index, "replay",
                                   f"replay differs from the recorded value ({_diff(got, want)}); {kind}; {context(op)}"))


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    if not (a.is_floating_point() or a.is_complex()):
        return 0.0 if torch.equal(a, b) else float("inf")
    d = (a.detach().to(torch.complex128 if a.is_complex() else torch.float64)
         - b.detach().to(torch.complex128 if b.is_complex() else torch.float64)).abs()
    both_nan = a.isnan() & b.isnan()
    d = d.masked_fill(both_nan, 0.0)
    return float(d.max()) if d.numel() else 0.0


def _changed(replayer: Replayer, op: Op, got: Any, baselines: dict[str, _Baseline]) -> bool:
    if got is None:
        return False
    base = baselines.get(op.label)
    if base is None:
        return not _same(got, replayer.values[op.label])
    if base.atol == 0.0:
        return not _same(got, base.value)
    return _max_abs(got, base.value) > base.atol


def _perturb_edges(replayer: Replayer, ops: list[Op], report: ValidationReport, gen: torch.Generator,
                   baselines: dict[str, _Baseline]) -> None:
    for edge in ops[0].parents:
        needing = [op for op in ops if not dependence_declared_absent(op, edge.position)
                   and op.label in replayer.values]
        random = [op for op in needing if op.label in baselines and baselines[op.label].random]
        needing = [op for op in needing if op not in random]
        report.edges_checked += 1
        parent = replayer.values[edge.source]
        why = ("the op varies between replays like a random kernel" if random else
               "declared shape-only in the kernel table") if not needing else (
            "the parent is empty: it holds no values to carry" if parent.numel() == 0 else
            "the output is empty: it holds no values to change" if all(_empty_output(op) for op in needing)
            else None)
        if why:
            report.edges_excused += 1
            report.excused.append((ops[0].label, edge.position, why))
            continue
        unchanged = _unchanged_after(replayer, needing, edge.position, _perturbations(parent, gen), baselines)
        if unchanged:  # nothing moved the output: try the strong perturbations (swaps, fills, large, sign)
            unchanged = _unchanged_after(replayer, unchanged, edge.position, _strong_perturbations(parent, gen),
                                         baselines)
        if unchanged and unchanged[0].kind in _COMPARISON_KINDS:  # take the value it is compared with
            unchanged = _unchanged_after(replayer, unchanged, edge.position,
                                         _compared_values(replayer, unchanged[0], edge.position, parent), baselines)
        if unchanged and _indexes_uniform_operand(replayer, unchanged[0], edge.position, parent):
            report.edges_excused += 1
            report.excused.append((unchanged[0].label, edge.position,
                                   "indices into an operand that holds one value everywhere"))
        elif unchanged and _indexes_a_single_position(replayer, unchanged[0], edge.position, parent):
            report.edges_not_perturbable += 1
            report.not_perturbable.append((unchanged[0].label, edge.position,
                                           "indices into a dimension of size 1: the only valid index is 0"))
        elif unchanged and is_piecewise_constant(unchanged[0]):
            op = unchanged[0]
            report.edges_not_perturbable += 1
            report.not_perturbable.append((op.label, edge.position, _piecewise_reason(op, edge.source)))
        elif unchanged and (why := _unselected_branch(replayer, unchanged[0], edge.position)):
            report.edges_not_perturbable += 1
            report.not_perturbable.append((unchanged[0].label, edge.position, why))
        elif unchanged:
            op = unchanged[0]
            report.findings.append(Finding(
                op.label, op.index, "edge",
                f"perturbing parent {edge.source} (argument {edge.position}) left the output unchanged: "
                f"the recorded edge carries no data; {context(op)}"))
        else:
            report.edges_carrying += 1


def _unchanged_after(replayer: Replayer, ops: list[Op], position: str, candidates: Iterator[torch.Tensor],
                     baselines: dict[str, _Baseline]) -> list[Op]:
    """The ops of `ops` whose output none of `candidates` (put at `position`) changed."""
    unchanged = list(ops)
    for candidate in candidates:
        still = []
        for op in unchanged:
            base = baselines.get(op.label)
            try:
                got = replayer.run(op, {position: candidate}, grad=base.grad if base else False)
            except ReplayError:
                still.append(op)  # this perturbation is outside the kernel's domain; try another
                continue
            if not _changed(replayer, op, got, baselines):
                still.append(op)
        unchanged = still
        if not unchanged:
            break
    return unchanged


# Kernels that pick each element from one argument or another by a mask:
# kind -> (mask positions, {branch position: the mask value that selects it}).
_SELECTIONS = {
    "where": (("0", "condition"), {"1": True, "input": True, "self": True, "2": False, "other": False}),
    "masked_fill": (("1", "mask"), {"2": True, "value": True}),
    "masked_fill_": (("1", "mask"), {"2": True, "value": True}),
}


def _unselected_branch(replayer: Replayer, op: Op, position: str) -> str | None:
    """Why a selection kernel's branch at `position` carries no data here: its mask never selects it."""
    spec = _SELECTIONS.get(op.kind)
    if spec is None or position not in spec[1]:
        return None
    mask_positions, branches = spec
    edges = {e.position: e.source for e in op.parents}
    _func, args, kwargs = replayer.call_of(op)
    tensors = dict(_call_tensors(args, kwargs))
    mask_pos = next((p for p in mask_positions if p in edges or p in tensors), None)
    if mask_pos is None:
        return None
    mask = replayer.values[edges[mask_pos]] if mask_pos in edges else tensors[mask_pos]
    if mask.dtype != torch.bool or bool((mask == branches[position]).any()):
        return None
    return (f"not perturbable: {op.kind} selects this argument where its mask is {branches[position]}, "
            "and the mask is nowhere so in this forward (a piecewise-constant choice, proven on the mask's edge)")


# Comparisons: an edge is proven by giving the argument the very value it is compared with.
_COMPARISON_KINDS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isclose", "maximum", "minimum", "fmax", "fmin"})


def _compared_values(replayer: Replayer, op: Op, position: str, t: torch.Tensor) -> Iterator[torch.Tensor]:
    """Copies of `t` holding the other operand's values (and one step either side, for integers)."""
    _func, args, kwargs = replayer.call_of(op)
    edges = {e.position: replayer.values[e.source] for e in op.parents}
    others = [v for i, v in enumerate(args) if str(i) != position] + [v for k, v in kwargs.items() if k != position]
    for pos, v in list(edges.items()):
        if pos != position:
            others.append(v)
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


def _returns_own_argument(replayer: Replayer, op: Op) -> bool:
    """An op that returned a parameter or buffer it was given (`buf.to(same device)`): no value is saved."""
    if not op.params or replayer.missing_parents(op):
        return False
    try:
        _func, args, kwargs = replayer.call_of(op)
        got = replayer.run(op)
    except (ReplayError, NotReplayable):
        return False
    return any(got is t for _pos, t in _call_tensors(args, kwargs))


def _indexes_uniform_operand(replayer: Replayer, op: Op, position: str, parent: torch.Tensor) -> bool:
    """Kernel-table excuse: an index argument into a tensor whose elements are all equal."""
    if op.kind not in INDEXING_KINDS or parent.is_floating_point() or parent.dtype == torch.bool:
        return False
    _func, args, kwargs = replayer.call_of(op)
    positions = {e.position: replayer.values[e.source] for e in op.parents}
    others = [positions.get(pos, t) for pos, t in _call_tensors(args, kwargs) if pos != position]
    return bool(others) and all(t.numel() > 0 and bool((t == t.reshape(-1)[0]).all()) for t in others)


def _empty_output(op: Op) -> bool:
    return op.out is not None and op.out.numel == 0


def _indexes_a_single_position(replayer: Replayer, op: Op, position: str, parent: torch.Tensor) -> bool:
    """An integer index tensor at `x[..., idx, ...]` (getitem position "1.k") into a dimension of size 1."""
    if op.kind != "getitem" or parent.is_floating_point() or parent.dtype == torch.bool:
        return False
    head, _, k = position.partition(".")
    if head != "1" or not k.isdigit():
        return False
    _func, args, _kwargs = replayer.call_of(op)
    index = args[1] if len(args) > 1 else None
    if not isinstance(index, tuple) or any(i is None or i is Ellipsis for i in index[:int(k)]):
        return False  # the indexed dimension is not simply the k-th
    source = next((replayer.values[e.source] for e in op.parents if e.position == "0"), None)
    return source is not None and int(k) < source.dim() and source.shape[int(k)] == 1


def _first_element_set(t: torch.Tensor, value: Any) -> torch.Tensor:
    """A copy of `t` (same strides) with its first element set to `value`."""
    p = t.clone()
    p[(0,) * t.dim()] = value
    return p


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


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        nan = a.isnan() & b.isnan()
        return bool(nan.any()) and bool(((a == b) | nan).all())
    return False


def _meta_ok(t: Any, op: Op) -> bool:
    if not isinstance(t, torch.Tensor) or op.out is None:
        return False
    return tuple(t.shape) == op.out.shape and str(t.dtype).replace("torch.", "") == op.out.dtype


def _describe(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
    return type(t).__name__


def _diff(a: torch.Tensor, b: torch.Tensor) -> str:
    try:
        d = (a.double() - b.double()).abs()
        return f"max abs diff {d.max().item():.3e}, {int((d > 0).sum())} of {d.numel()} elements"
    except Exception:
        return "values differ"


# -- metadata invariants ------------------------------------------------------------------------
def check_invariants(trace: Trace) -> None:
    """Raise `TraceInvariantError` at the first op whose record disagrees with what ran."""
    for op in trace.ops:
        problem = _op_invariant(trace, op)
        if problem:
            raise TraceInvariantError(f"{op.label}: {problem}", site=context(op), op=op.label, invariant=problem)
    problem, op = _unattributed_parameter(trace)
    if problem:
        raise TraceInvariantError(f"{op.label}: {problem}", site=context(op), op=op.label, invariant=problem,
                                  remedy=UNATTRIBUTED_REMEDY)


def _op_invariant(trace: Trace, op: Op) -> str | None:
    for edge in op.parents:
        if edge.source not in trace or trace[edge.source].index >= op.index:
            return f"edge from {edge.source} does not point to an earlier op"
    value = trace.values.get(op.label)
    if value is not None and not _meta_ok(value, op):
        return f"saved value {_describe(value)} disagrees with the recorded metadata {op.out}"
    for addr in op.params:
        if addr not in trace.params:
            return f"consumes {addr!r}, which is not a parameter or buffer of the model"
    call = trace.live_calls.get(op.label)
    if call is None:
        return None
    _func, args, kwargs = call
    positions = {e.position for e in op.parents}
    params_seen: set[int] = set()
    for pos, t in _call_tensors(args, kwargs):
        if pos in positions:
            continue
        if isinstance(t, nn.Parameter):
            params_seen.add(id(t))
        elif not op.params:
            return f"argument {pos} is a tensor the trace does not know (an orphan tensor)"
    if len(params_seen) > len(op.params):
        return "reads a parameter that is not attributed to it"
    return None


def _call_tensors(args: tuple, kwargs: dict) -> Iterator[tuple[str, torch.Tensor]]:
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


UNATTRIBUTED_REMEDY = (
    "The module read a tensor held outside its parameters and buffers instead of the parameter: a patched or "
    "quantized copy, or a cache an earlier forward filled (LeViT's attention-bias cache in eval mode). For a "
    "cache, capture the forward that fills it (the first after model.train(); model.eval()), so the trace "
    "records how it is made from the parameter; otherwise do not treat this trace as an exact record."
)


def _unattributed_parameter(trace: Trace) -> tuple[str | None, Op | None]:
    """A module that ran, read untracked tensors, and never had one of its own parameters attributed."""
    consumed = {addr for op in trace.ops for addr in op.params}
    aliases = {alias: rec.address for rec in trace.params.values() for alias in rec.tied}
    constants_in: dict[str, list[Op]] = defaultdict(list)
    for op in trace.ops:
        if op.kind == CONSTANT_KIND and op.module_stack:
            constants_in[op.module].append(op)
    for address, constants in constants_in.items():
        scope = trace.modules.get(address)
        if scope is None:
            continue
        for addr in scope.params:
            rec = trace.params.get(aliases.get(addr, addr))
            if rec is None or rec.is_buffer or rec.address in consumed:
                continue
            labels = ", ".join(c.label for c in constants)
            return (f"parameter {addr!r} of {scope.class_name} '{address}' was never attributed to an op, "
                    f"while the module computed from untracked tensors ({labels}): a copy or a cache of it?"), constants[0]
    return None, None


def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of `model` by each of its addresses (tied and non-persistent ones too)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return {name: t for name, t in named}
