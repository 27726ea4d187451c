"""Per-rank checks of a distributed trace's collectives, from their recorded inputs and outputs (no replay).

Replaying a collective on one rank would wait for peers that are not replaying, so nothing is
re-run. Each collective op is checked against what its recorded tensors must satisfy: the output
shape its input and group size imply, and, where one rank can tell, the values: an all-gather's
own slice is its input; a broadcast's source keeps its input. Sums across ranks need the other
ranks' values and are not checked here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import torch

from ..errors import DistributedReplayUnsupportedError
from ..ir import Op, Trace


@dataclass(frozen=True, slots=True)
class CollectiveFinding:
    """One collective that fails a check."""

    label: str
    check: str  # "shape" or "value"
    message: str


@dataclass(slots=True)
class RankValidationReport:
    """What `validate_rank` checked on this rank and what failed."""

    rank: int | None
    collectives: int = 0
    shape_checked: int = 0
    value_checked: int = 0
    not_checked: list[str] = field(default_factory=list)  # labels whose values this rank cannot check alone
    findings: list[CollectiveFinding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def __bool__(self) -> bool:
        return self.passed


def validate_rank(trace: Trace) -> RankValidationReport:
    """Check every collective of `trace` by its recorded input and output (see the module docstring)."""
    collectives = [op for op in trace.ops if op.collective is not None]
    rank = (trace.provenance.distributed or {}).get("rank")
    if not collectives and not any(op.layout is not None for op in trace.ops):
        raise DistributedReplayUnsupportedError("the trace holds no collective and no DTensor op",
                                                site="validate_rank(trace)", remedy="Use tracer.validate(trace).")
    report = RankValidationReport(rank=rank, collectives=len(collectives))
    for op in collectives:
        source = _input_of(op, trace)
        problem = _shape_problem(op, source)
        report.shape_checked += source is not None
        if problem:
            report.findings.append(CollectiveFinding(op.label, "shape", problem))
            continue
        checked = _value_check(op, source, trace, rank)
        if checked is None:
            report.not_checked.append(op.label)
        else:
            report.value_checked += 1
            if checked:
                report.findings.append(CollectiveFinding(op.label, "value", checked))
    return report


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
