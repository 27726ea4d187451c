"""Per-rank validation of a distributed trace: local ops replayed, collectives checked by their recorded tensors.

Replaying a collective on one rank would wait for peers that are not replaying, so collectives are
not re-run: each is checked against what its recorded tensors must satisfy (the output shape its
input and group size imply; where one rank can tell, the values: an all-gather's own slice is its
input). Sums across ranks need the other ranks' values and are listed as not checked.

Every other op is replayed from its saved parents with `tracer.replay.Replayer` (the capture's live
calls) and its output compared bit for bit with the recorded value. A parent that entered the call
as a DTensor enters the replay as one again (its saved local shard with the live argument's mesh,
placements and global shape), so DTensor computes the op as it did: a row-wise Linear's bias lands
on the partial sum once. A DTensor op that would have to communicate to compute (redistributing an
input across ranks inside the call) is stopped before it sends anything and listed as not checked;
so are ops whose values were not saved. Random and uninitialised kernels (the replay kernel table's)
are compared by shape and dtype.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import DistributedReplayUnsupportedError
from ..ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op, Trace

@dataclass(frozen=True, slots=True)
class RankFinding:
    """One op that fails a check: `check` is "shape" or "value" (a collective) or "replay" (a local op)."""

    label: str
    check: str
    message: str


@dataclass(slots=True)
class RankValidationReport:
    """What `validate_rank` checked on this rank and what failed."""

    rank: int | None
    collectives: int = 0
    shape_checked: int = 0
    value_checked: int = 0
    not_checked: list[str] = field(default_factory=list)  # collective labels whose values need the peers
    ops_replayed: int = 0  # local (non-collective) ops recomputed from their saved parents
    ops_exact: int = 0  # ... whose recomputed output equals the recorded value bit for bit
    ops_nondeterministic: int = 0  # ... random or uninitialised by the kernel table: compared by shape and dtype
    replay_not_checked: list[tuple[str, str]] = field(default_factory=list)  # (local op label, why not)
    findings: list[RankFinding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def __bool__(self) -> bool:
        return self.passed

    def to_text(self) -> str:
        """A short readable summary: counts, then each finding."""
        head = (f"rank {self.rank}: {'PASSED' if self.passed else 'FAILED'}; {self.ops_replayed} local ops replayed "
                f"({self.ops_exact} exact, {self.ops_nondeterministic} random, {len(self.replay_not_checked)} not checked); {self.collectives} collectives "
                f"({self.shape_checked} shape-checked, {self.value_checked} value-checked, "
                f"{len(self.not_checked)} need the peers)")
        return "\n".join([head, *(f"  {f.label} [{f.check}]: {f.message}" for f in self.findings)])


def validate_rank(trace: Trace, *, replay: bool = True) -> RankValidationReport:
    """Check `trace` on this rank: replay its local ops, check its collectives (see the module docstring)."""
    collectives = [op for op in trace.ops if op.collective is not None]
    rank = (trace.provenance.distributed or {}).get("rank")
    if not collectives and not any(op.layout is not None for op in trace.ops):
        raise DistributedReplayUnsupportedError("the trace holds no collective and no DTensor op",
                                                site="validate_rank(trace)", remedy="Use tracer.validate(trace).")
    report = RankValidationReport(rank=rank, collectives=len(collectives))
    if replay:
        _replay_local_ops(trace, report)
    for op in collectives:
        _check_collective(op, trace, rank, report)
    order = {op.label: i for i, op in enumerate(trace.ops)}
    report.findings.sort(key=lambda f: order.get(f.label, -1))
    return report


# -- local ops ---------------------------------------------------------------------------------
def _replay_local_ops(trace: Trace, report: RankValidationReport) -> None:
    from ..replay import ReplayError, Replayer
    from ..replay.batch import same
    from ..replay.edges import max_abs
    from ..replay.offline import NotReplayable

    replayer = Replayer(trace)
    for op in trace.ops:
        if op.collective is not None or op.kind in (INPUT_KIND, CONSTANT_KIND, OUTPUT_KIND):
            continue
        recorded = trace.values.get(op.label)
        if not isinstance(recorded, torch.Tensor):
            report.replay_not_checked.append((op.label, "its value was not saved"))
            continue
        missing = replayer.missing_parents(op)
        if missing:
            report.replay_not_checked.append((op.label, f"the value of its parent {missing[0]} was not saved"))
            continue
        try:
            with _NoCommunication():
                got = _plain(replayer.run(op, _as_dtensors(replayer, op)))
        except NotReplayable as exc:
            report.replay_not_checked.append((op.label, str(exc)))
            continue
        except ReplayError as exc:
            report.replay_not_checked.append((op.label, str(exc.cause) if isinstance(exc.cause, WouldCommunicate)
                                              else f"its call does not run again: {exc.cause}"))
            continue
        report.ops_replayed += 1
        if not isinstance(got, torch.Tensor):
            report.replay_not_checked.append((op.label, "the replayed call returned no tensor"))
        elif got.shape != recorded.shape:
            report.replay_not_checked.append((op.label, f"replayed it gives {list(got.shape)}, recorded {list(recorded.shape)}"))
        elif _random(replayer, op):
            report.ops_nondeterministic += 1
            if got.dtype != recorded.dtype:
                report.findings.append(RankFinding(op.label, "replay", f"replayed it is {got.dtype}, recorded {recorded.dtype}"))
        elif same(got, recorded):
            report.ops_exact += 1
        else:
            diff = max_abs(got, recorded)
            report.findings.append(RankFinding(op.label, "replay", f"replayed from its saved parents it differs from the "
                                                                   f"recorded value (max |diff| {diff:.3g})"))


def _random(replayer: Any, op: Op) -> bool:
    """Whether the kernel table says `op`'s output is random or uninitialised for its recorded call."""
    from ..replay.interpreter import is_nondeterministic

    try:
        _func, args, kwargs = replayer.call_of(op)
    except Exception:
        return False
    return is_nondeterministic(op, args, kwargs)


class WouldCommunicate(RuntimeError):
    """Raised inside a replay when a DTensor op would issue a collective (it is then not checked)."""


_COLLECTIVE_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd", "c10d", "_dtensor")
_LOCAL_HELPERS = ("wait_tensor", "_wrap_tensor_autograd")  # in those namespaces, but they send nothing


class _NoCommunication(TorchDispatchMode):
    """Lets DTensor lower its op first (NotImplemented), then refuses any collective the lowering issues."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(getattr(t, "__name__", "") == "DTensor" for t in types):
            return NotImplemented
        if getattr(func, "namespace", "") in _COLLECTIVE_NAMESPACES and func._opname not in _LOCAL_HELPERS:
            raise WouldCommunicate(f"DTensor would redistribute an input across ranks inside the op "
                                   f"({func}); one rank cannot replay that alone")
        return func(*args, **(kwargs or {}))


def _as_dtensors(replayer: Any, op: Op) -> dict[str, Any]:
    """Overrides rebuilding each parent that entered the live call as a DTensor from its saved local shard."""
    from .admission import is_dtensor

    try:
        _func, args, kwargs = replayer.call_of(op)
    except Exception:
        return {}
    from ..replay.edges import call_tensors

    live_at = dict(call_tensors(args, kwargs))
    out = {}
    for e in op.parents:
        live = live_at.get(e.position)
        value = replayer.values.get(e.source)
        if is_dtensor(live) and isinstance(value, torch.Tensor) and not is_dtensor(value):
            from torch.distributed.tensor import DTensor

            out[e.position] = DTensor.from_local(value, live.device_mesh, live.placements, run_check=False,
                                                 shape=live.shape, stride=live.stride())
    return out


def _local(a: Any) -> Any:
    from .admission import is_dtensor

    return a._local_tensor if is_dtensor(a) else a


def _plain(t: Any) -> Any:
    t = _local(t)
    if type(t).__name__ == "AsyncCollectiveTensor":
        t = t.trigger_wait()
        t = getattr(t, "elem", t)
    return t


# -- collectives ---------------------------------------------------------------------------------
def _check_collective(op: Op, trace: Trace, rank: int | None, report: RankValidationReport) -> None:
    source = _input_of(op, trace)
    problem = _shape_problem(op, source)
    report.shape_checked += source is not None
    if problem:
        report.findings.append(RankFinding(op.label, "shape", problem))
        return
    checked = _value_check(op, source, trace, rank)
    if checked is None:
        report.not_checked.append(op.label)
    else:
        report.value_checked += 1
        if checked:
            report.findings.append(RankFinding(op.label, "value", checked))


def _input_of(op: Op, trace: Trace) -> Op | None:
    """The op whose output the collective sends (c10d ops taking an output buffer first send the second)."""
    parents = [e for e in op.parents if not e.position.startswith("rank")]
    if op.collective.api == "c10d" and op.collective.name in ("all_gather", "reduce_scatter", "all_to_all"):
        parents = [e for e in parents if e.position != "0"] or parents
    return trace[parents[0].source] if parents else None


def _shape_problem(op: Op, source: Op | None) -> str | None:
    if source is None or source.out is None or op.out is None:
        return None
    n, got, sent = op.collective.size, tuple(op.out.shape), tuple(source.out.shape)
    if not sent:
        return None
    if op.collective.name == "all_gather":
        want = (sent[0] * n, *sent[1:])
    elif op.collective.name == "reduce_scatter":
        want = (sent[0] // n, *sent[1:])
    else:
        want = sent
    if got != want and not (op.collective.name in ("all_gather", "reduce_scatter") and _same_numel(got, want)):
        return f"{op.collective.name} over {n} ranks of {list(sent)} should give {list(want)}, recorded {list(got)}"
    return None


def _same_numel(a: tuple, b: tuple) -> bool:
    return torch.Size(a).numel() == torch.Size(b).numel()


def _value_check(op: Op, source: Op, trace: Trace, rank: int | None) -> str | None | bool:
    """A failure message, False when the values agree, None when this rank cannot check them alone."""
    c = op.collective
    got, sent = trace.values.get(op.label), trace.values.get(source.label) if source is not None else None
    if got is None or sent is None or rank is None or rank not in c.group:
        return None
    if c.name == "all_gather":
        mine = got.reshape(-1).chunk(c.size)[c.group.index(rank)]
        return False if torch.equal(mine, sent.reshape(-1)) else "this rank's slice of the gathered output is not its input"
    return None
