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
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from ..errors import (DistributedReplayUnsupportedError, ReplayMismatchError, ReplayUnavailableError,
                      StructureOnlyValidationError, TraceInvariantError,
                      TracerError, ValidationFailedError, ValidationScopeError, ValuesMissingError)
from ..capture.collector import fewer_collections
from ..ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op, Trace
from .autocast import region_for
from .edges import Baseline, EdgeVerdict, call_tensors, check_edge, check_edges, max_abs, same
from .interpreter import NotReplayable, ReplayError, context, is_nondeterministic
from .lane import CHUNK, fast_lane
from .offline import has_call_templates
from .received import ReceivingReplayer

_SEED = 20240606
_LISTED = 20  # not-perturbable edges named in to_text()


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
    autocast: dict[str, str] = field(default_factory=dict)  # op label -> the autocast region it replayed in
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
            "not_perturbable": [list(e) for e in self.not_perturbable],  # every one, with its reason
            "ops_within_spread": self.ops_within_spread, "tolerances": dict(self.tolerances),
            "autocast": dict(self.autocast),
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
        if self.autocast:
            regions = sorted(set(self.autocast.values()))
            lines.append(f"  autocast: {len(self.autocast)} op(s) replayed inside {', '.join(regions)}, as their "
                         f"recorded dtypes show the forward ran them (first: {next(iter(self.autocast))})")
        for label, tol in list(self.tolerances.items())[:5]:
            lines.append(f"  tolerance {label}: max abs {tol['atol']:.3e} ({tol['why']})")
        for label, position, why in self.excused[:5]:
            lines.append(f"  excused {label} argument {position}: {why}")
        for label, position, why in self.not_perturbable[:_LISTED]:
            lines.append(f"  not perturbable {label} argument {position}: {why}")
        if len(self.not_perturbable) > _LISTED:
            lines.append(f"  ... {len(self.not_perturbable) - _LISTED} more not perturbable (all in to_dict())")
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
    with fewer_collections():  # collections while validating scan only what validation makes
        report = _checked(trace, scope, perturb, params)
    report.seconds = time.perf_counter() - started
    return report


def _checked(trace: Trace, scope: str, perturb: bool, params: Mapping[str, torch.Tensor] | None) -> ValidationReport:
    check_invariants(trace)
    report = ValidationReport(scope=scope, ops_total=len(trace.ops))
    _verification_findings(trace, report)
    replayer = ReceivingReplayer(trace, params=params)
    gen = torch.Generator().manual_seed(_SEED)
    groups: dict[int, list[Op]] = defaultdict(list)
    for op in trace.ops:
        groups[op.func_call_id].append(op)
    calls = list(groups.values())
    with torch.no_grad():  # every replay runs without autograd unless it asks for it (grad=True)
        for start in range(0, len(calls), CHUNK):
            chunk = calls[start:start + CHUNK]
            try:
                fast = fast_lane(replayer, chunk, gen, perturb)
            except Exception:  # the lane only shortens: whatever it met, the full checks run
                fast = [None] * len(chunk)
            for ops, carrying in zip(chunk, fast):
                try:
                    if carrying is None:
                        _check_call(replayer, ops, report, gen, perturb)
                    else:
                        _finish_exact_call(replayer, ops, carrying, report, gen, perturb)
                except Exception as exc:  # whatever a kernel does, validation reports it and goes on
                    op = ops[0]
                    report.findings.append(Finding(op.label, op.index, "not_replayable",
                                                   f"not replayable: {type(exc).__name__}: {exc}; {context(op)}"))
    report.findings.sort(key=lambda f: f.index)
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
    sharded = next((op for op in trace.ops if op.collective is not None or op.layout is not None), None)
    if sharded is not None:  # a distributed capture: replay would issue collectives on this rank alone
        raise DistributedReplayUnsupportedError(
            f"{sharded.label} is a {'collective' if sharded.collective else 'DTensor op'} of a distributed capture",
            site=sharded.label)
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
def _check_call(replayer: ReceivingReplayer, ops: list[Op], report: ValidationReport, gen: torch.Generator,
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
    baselines: dict[str, Baseline] = {}
    for op in ops:
        report.ops_replayed += 1
        want = values.get(op.label)
        try:
            got, exact = _replay_as_received(replayer, op, ops, want, by_meta=random)
        except ReplayError as exc:
            report.findings.append(Finding(op.label, op.index, "replay", str(exc)))
            return
        if want is None:  # the op returned a parameter or buffer itself (checked above): nothing saved
            report.ops_exact += 1
            continue
        if got is None or not _meta_ok(got, op):
            report.findings.append(Finding(op.label, op.index, "replay",
                                           f"replay gave {_describe(got)}, recorded {op.out}; {context(op)}"))
            continue
        if random:
            report.ops_nondeterministic += 1
        elif exact:
            report.ops_exact += 1
        else:
            _compare_inexact(replayer, op, got, want, report, baselines)
    region = replayer.autocast.get(first.func_call_id)
    if region is not None:
        report.autocast.update((op.label, region.describe()) for op in ops)
    if perturb and not random:
        _record(report, check_edges(replayer, ops, gen, baselines))


def _finish_exact_call(replayer: ReceivingReplayer, ops: list[Op], carrying: frozenset[str],
                       report: ValidationReport, gen: torch.Generator, perturb: bool) -> None:
    """Count a call the fast lane replayed bit for bit; check the edges it did not prove carrying."""
    report.ops_replayed += len(ops)
    report.ops_exact += len(ops)
    if not perturb:
        return
    parents = ops[0].parents
    rest = [e for e in parents if e.position not in carrying]
    report.edges_checked += len(parents) - len(rest)
    report.edges_carrying += len(parents) - len(rest)
    if rest:
        _record(report, (check_edge(replayer, ops, e, gen, {}) for e in rest))


def _replay_as_received(replayer: ReceivingReplayer, op: Op, ops: list[Op], want: torch.Tensor | None,
                        by_meta: bool = False) -> tuple[Any, bool]:
    """`op` replayed from its saved parents, and whether that equals `want` bit for bit.

    Where it does not and a parent wrote through a view, `op` is replayed again from that view's base
    after the write (what it read); a choice that reproduces `want` (its metadata, for a random
    kernel) then stands for the call's every op.
    """
    try:
        got = replayer.run(op)
        failure = None
    except ReplayError as exc:
        got, failure = None, exc
    if want is not None and isinstance(got, torch.Tensor) and _meta_ok(got, op) and (by_meta or same(got, want)):
        return got, True
    if want is not None and (failure is not None or not _meta_ok(got, op)):
        again = _inside_autocast(replayer, op, got)
        if again is not None and again is not got:
            got, failure = again, None
            if by_meta or same(got, want):
                return got, True
    bases = replayer.bases_after_view_writes(op) if want is not None else {}
    for chosen in _subsets(list(bases))[:_MAX_BASE_CHOICES]:  # each parent read either the view or its base
        override = {pos: bases[pos] for pos in chosen}
        try:
            again = replayer.run(op, override)
        except ReplayError:
            continue
        if isinstance(again, torch.Tensor) and _meta_ok(again, op) and (by_meta or same(again, want)):
            for each in ops:
                replayer.received[each.label] = override
            return again, True
    if failure is not None:
        raise failure
    return got, False


_MAX_BASE_CHOICES = 15


def _inside_autocast(replayer: ReceivingReplayer, op: Op, got: Any) -> Any:
    """`op` replayed inside the autocast region its recorded dtype shows (see `autocast`), kept for its call
    when that gives the recorded dtype; else `got` as it was."""
    if op.func_call_id in replayer.autocast:
        return got
    region = region_for(op, got, (replayer.values[e.source].dtype for e in op.parents if e.source in replayer.values))
    if region is None:
        return got
    replayer.autocast[op.func_call_id] = region
    try:
        again = replayer.run(op)
    except ReplayError:
        again = None
    if isinstance(again, torch.Tensor) and _meta_ok(again, op):
        return again
    del replayer.autocast[op.func_call_id]
    return got


def _subsets(items: list[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of `items`, largest first."""
    from itertools import combinations

    return [c for n in range(len(items), 0, -1) for c in combinations(items, n)]


def _record(report: ValidationReport, verdicts: Iterable[EdgeVerdict]) -> None:
    for verdict in verdicts:
        report.edges_checked += 1
        op = verdict.op
        if verdict.outcome == "carries":
            report.edges_carrying += 1
        elif verdict.outcome == "excused":
            report.edges_excused += 1
            report.excused.append((op.label, verdict.position, verdict.why))
        elif verdict.outcome == "not_perturbable":
            report.edges_not_perturbable += 1
            report.not_perturbable.append((op.label, verdict.position, verdict.why))
        else:
            report.findings.append(Finding(op.label, op.index, "edge", f"{verdict.why}; {context(op)}"))


def _returns_own_argument(replayer: ReceivingReplayer, op: Op) -> bool:
    """An op that returned a parameter or buffer it was given (`buf.to(same device)`): no value is saved."""
    if not op.params or replayer.missing_parents(op):
        return False
    try:
        _func, args, kwargs = replayer.call_of(op)
        got = replayer.run(op)
    except (ReplayError, NotReplayable):
        return False
    return any(got is t for _pos, t in call_tensors(args, kwargs))


# How many replays measure a kernel's replay-to-replay spread, and the slack on that spread.
_SPREAD_REPLAYS = 4
_SPREAD_FACTOR = 2.0
# A spread above this fraction of the output's magnitude is randomness, not rounding.
_RANDOM_SPREAD = 1e-3


def _compare_inexact(replayer: ReceivingReplayer, op: Op, got: torch.Tensor, want: torch.Tensor,
                     report: ValidationReport, baselines: dict[str, Baseline]) -> None:
    """A replay that is not bit-equal: retry in the capture's grad mode, then measure the kernel's spread.

    Kernels that choose another algorithm when autograd is recording (CPU RNNs) replay exactly
    with grad enabled, as the capture ran. A kernel whose replays differ among themselves is
    held to its own spread (disclosed per op); a deterministic kernel must stay bit-exact.
    """
    grad = False
    if op.out is not None and op.out.requires_grad:
        again = replayer.run(op, grad=True)
        if isinstance(again, torch.Tensor) and same(again, want):
            report.ops_exact += 1
            baselines[op.label] = Baseline(again, grad=True)
            return
        if isinstance(again, torch.Tensor) and _meta_ok(again, op):
            got, grad = again, True
    replays = [got] + [replayer.run(op, grad=grad) for _ in range(_SPREAD_REPLAYS - 1)]
    spread = max(max_abs(r, got) for r in replays[1:])
    off = max_abs(want, got)
    if spread > 0 and off <= _SPREAD_FACTOR * spread:
        atol = _SPREAD_FACTOR * spread
        random = spread > _RANDOM_SPREAD * max(1.0, max_abs(got, torch.zeros_like(got)))
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
        baselines[op.label] = Baseline(got, grad=grad, atol=atol, random=random)
        return
    kind = ("replays differ among themselves by at most " f"{spread:.3e}" if spread > 0
            else "the kernel replays bit for bit (deterministic)")
    report.findings.append(Finding(op.label, op.index, "replay",
                                   f"replay differs from the recorded value ({_diff(got, want)}); {kind}; {context(op)}"))


def _meta_ok(t: Any, op: Op) -> bool:
    out = op.out
    if out is None or not isinstance(t, torch.Tensor):
        return False
    text = _DTYPE_TEXT.get(t.dtype)
    if text is None:
        text = _DTYPE_TEXT[t.dtype] = str(t.dtype).replace("torch.", "")
    return t.shape == out.shape and text == out.dtype


_DTYPE_TEXT: dict[torch.dtype, str] = {}


def _describe(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
    return type(t).__name__


def _diff(a: torch.Tensor, b: torch.Tensor) -> str:
    try:
        wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64  # .double() drops imaginary parts
        d = (a.to(wide) - b.to(wide)).abs()
        return f"max abs diff {d.max().item():.3e}, {int((d > 0).sum())} of {d.numel()} elements"
    except Exception:
        return "values differ"


# -- metadata invariants ------------------------------------------------------------------------
def check_invariants(trace: Trace) -> None:
    """Raise `TraceInvariantError` at the first op whose record disagrees with what ran."""
    index = {op.label: op.index for op in trace.ops}
    for op in trace.ops:
        problem = _op_invariant(trace, op, index)
        if problem:
            raise TraceInvariantError(f"{op.label}: {problem}", site=context(op), op=op.label, invariant=problem)
    problem, op = _unattributed_parameter(trace)
    if problem:
        raise TraceInvariantError(f"{op.label}: {problem}", site=context(op), op=op.label, invariant=problem,
                                  remedy=UNATTRIBUTED_REMEDY)


def _op_invariant(trace: Trace, op: Op, index: Mapping[str, int]) -> str | None:
    at = op.index
    for edge in op.parents:
        if index.get(edge.source, at) >= at:
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
    if not kwargs and len(args) < len(_EVERY_POSITION) and positions == _EVERY_POSITION[len(args)]:
        return None  # every argument is a parent: no other tensor to account for
    params_seen: set[int] = set()
    for pos, t in call_tensors(args, kwargs):
        if pos in positions:
            continue
        if isinstance(t, nn.Parameter):
            params_seen.add(id(t))
        elif not op.params:
            return f"argument {pos} is a tensor the trace does not know (an orphan tensor)"
    if len(params_seen) > len(op.params):
        return "reads a parameter that is not attributed to it"
    return None


_EVERY_POSITION = tuple(frozenset(str(i) for i in range(n)) for n in range(9))  # by argument count


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
    """Every parameter and buffer of `model` by each of its addresses (tied and non-persistent ones too); a
    torch.compile wrapper by its original module's addresses, as `tracer.trace` records them."""
    from ..capture.compiled import unwrap

    model, _unwrapped = unwrap(model)
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return {name: t for name, t in named}
