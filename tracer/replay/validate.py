"""`validate(trace)`: replay every op, perturb every edge, check the trace's invariants.

Three checks, in this order:
1. metadata invariants (edges point backwards, saved values match their metadata, every
   consumed parameter is attributed, no tensor reaches a call unrecorded): a violation
   means the trace is not a faithful record, so it always raises `TraceInvariantError`;
2. replay: each op recomputed from its saved parents equals the recorded value bit for bit
   (random kernels, declared in the kernel table, are compared by metadata);
3. perturbation: changing a parent changes the child, except where the kernel table
   declares the dependence absent.
Checks 2 and 3 give a report; `raise_on_failure=True` raises `ReplayMismatchError`.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from ..errors import (ReplayMismatchError, ReplayUnavailableError, StructureOnlyValidationError,
                     TraceInvariantError, ValidationScopeError, ValuesMissingError)
from ..ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op, Trace
from .interpreter import (INDEXING_KINDS, ReplayError, Replayer, context, dependence_declared_absent,
                     is_nondeterministic)

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
            "seconds": round(self.seconds, 4),
        }

    def to_text(self) -> str:
        head = "PASSED" if self.passed else f"FAILED at {self.first_failing_op}"
        lines = [
            f"validation ({self.scope}): {head}",
            f"  ops: {self.ops_replayed}/{self.ops_total} replayed, {self.ops_exact} bit-exact, "
            f"{self.ops_nondeterministic} random (metadata compared)",
            f"  edges: {self.edges_checked} perturbed, {self.edges_carrying} carry data, "
            f"{self.edges_excused} excused",
        ]
        for label, position, why in self.excused[:5]:
            lines.append(f"  excused {label} argument {position}: {why}")
        for f in self.findings[:10]:
            lines.append(f"  [{f.check}] {f.label}: {f.message}")
        if len(self.findings) > 10:
            lines.append(f"  ... {len(self.findings) - 10} more")
        return "\n".join(lines)


def validate(trace: Trace, scope: str = "forward", *, raise_on_failure: bool = False,
             perturb: bool = True) -> "ValidationReport":
    """Replay and perturb `trace`; the report is truthy when every op reproduces and every edge carries data.

    Nothing is written into the trace: the returned `ValidationReport` is the whole result.
    """
    report = validation_report(trace, scope, perturb=perturb)
    if not report.passed and raise_on_failure:
        first = report.findings[0]
        raise ReplayMismatchError(
            f"validation failed at {first.label}: {first.message}", site=context(trace[first.label]),
            first_failing_op=first.label, report=report.to_dict())
    return report


def validation_report(trace: Trace, scope: str = "forward", *, perturb: bool = True) -> ValidationReport:
    """The full `ValidationReport` for `trace` (raises typed for traces that cannot be replayed)."""
    _admit(trace, scope)
    started = time.perf_counter()
    check_invariants(trace)
    report = ValidationReport(scope=scope, ops_total=len(trace.ops))
    _verification_findings(trace, report)
    replayer = Replayer(trace)
    gen = torch.Generator().manual_seed(_SEED)
    groups: dict[int, list[Op]] = defaultdict(list)
    for op in trace.ops:
        groups[op.func_call_id].append(op)
    for ops in groups.values():
        _check_call(replayer, ops, report, gen, perturb)
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
    if not trace.live_calls:
        raise ReplayUnavailableError("the trace holds no live calls (loaded from a file?)", site="validate(trace)")


def _verification_findings(trace: Trace, report: ValidationReport) -> None:
    """A trace marked not verified (quantized state, capture gap) can never pass validation."""
    if trace.provenance.verified:
        return
    reasons = trace.provenance.unverified_reasons or ("the trace is marked not verified",)
    labels = [lab for lab in trace.provenance.unverified_ops if lab in trace]
    op = trace[labels[0]] if labels else trace.ops[0]
    report.findings.append(Finding(op.label, op.index, "verification", "; ".join(reasons)))


# -- replay and perturbation of one call ------------------------------------------------------
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
    if missing or first.label not in replayer.calls:
        what = ", ".join(sorted(set(missing))) or "its live call"
        report.findings.append(Finding(first.label, first.index, "missing", f"not replayable: {what} not saved"))
        return
    func, args, kwargs = replayer.calls[first.label]
    random = is_nondeterministic(first, args, kwargs)
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
            report.findings.append(Finding(op.label, op.index, "replay",
                                           f"replay differs from the recorded value ({_diff(got, want)}); {context(op)}"))
    if perturb and not random:
        _perturb_edges(replayer, ops, report, gen)


def _perturb_edges(replayer: Replayer, ops: list[Op], report: ValidationReport, gen: torch.Generator) -> None:
    for edge in ops[0].parents:
        needing = [op for op in ops if not dependence_declared_absent(op, edge.position)
                   and op.label in replayer.values]
        report.edges_checked += 1
        parent = replayer.values[edge.source]
        why = "declared shape-only in the kernel table" if not needing else (
            "the parent is empty: it holds no values to carry" if parent.numel() == 0 else None)
        if why:
            report.edges_excused += 1
            report.excused.append((ops[0].label, edge.position, why))
            continue
        unchanged = list(needing)
        for candidate in _perturbations(parent, gen):
            still = []
            for op in unchanged:
                try:
                    got = replayer.run(op, {edge.position: candidate})
                except ReplayError:
                    still.append(op)  # this perturbation is outside the kernel's domain; try another
                    continue
                if got is None or _same(got, replayer.values[op.label]):
                    still.append(op)
            unchanged = still
            if not unchanged:
                break
        if unchanged and _indexes_uniform_operand(replayer, unchanged[0], edge.position, parent):
            report.edges_excused += 1
            report.excused.append((unchanged[0].label, edge.position,
                                   "indices into an operand that holds one value everywhere"))
        elif unchanged:
            op = unchanged[0]
            report.findings.append(Finding(
                op.label, op.index, "edge",
                f"perturbing parent {edge.source} (argument {edge.position}) left the output unchanged: "
                f"the recorded edge carries no data; {context(op)}"))
        else:
            report.edges_carrying += 1


def _returns_own_argument(replayer: Replayer, op: Op) -> bool:
    """An op that returned a parameter or buffer it was given (`buf.to(same device)`): no value is saved."""
    call = replayer.calls.get(op.label)
    if call is None or not op.params or replayer.missing_parents(op):
        return False
    try:
        got = replayer.run(op)
    except ReplayError:
        return False
    _func, args, kwargs = call
    return any(got is t for _pos, t in _call_tensors(args, kwargs))


def _indexes_uniform_operand(replayer: Replayer, op: Op, position: str, parent: torch.Tensor) -> bool:
    """Kernel-table excuse: an index argument into a tensor whose elements are all equal."""
    if op.kind not in INDEXING_KINDS or parent.is_floating_point() or parent.dtype == torch.bool:
        return False
    _func, args, kwargs = replayer.calls[op.label]
    positions = {e.position: replayer.values[e.source] for e in op.parents}
    others = [positions.get(pos, t) for pos, t in _call_tensors(args, kwargs) if pos != position]
    return bool(others) and all(t.numel() > 0 and bool((t == t.reshape(-1)[0]).all()) for t in others)


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
        flat = t.clone()
        flat.view(-1)[0] = float("inf") if t.is_floating_point() else complex(float("inf"), 0)
        yield flat
        return
    yield t ^ 1
    yield (t - 1).clamp_min(0)
    yield t.flip(tuple(range(t.dim())))


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
        raise TraceInvariantError(f"{op.label}: {problem}", site=context(op), op=op.label, invariant=problem)


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
                    f"while the module computed from untracked tensors ({labels})"), constants[0]
    return None, None
