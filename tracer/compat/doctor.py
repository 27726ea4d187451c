"""`doctor(model, inputs)`: the whole ledger of deployment paths, each row marked as applying or not.

The detectors are listed explicitly in `tracer.compat.rows.DETECTORS` (no registry filled by
imports); each returns the row for its path, with `applies` saying whether this model takes it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable

from torch import nn

STATUSES = ("pass", "not_tested", "known_broken", "scope")
SEVERITIES = ("info", "warning", "error")


@dataclass(frozen=True)
class Row:
    """One ledger row: stable key, status, severity, evidence in words, and the tests that back it.

    `applies` says whether this model takes the path; `detail` what the detector found on it.
    """

    key: str
    status: str
    severity: str
    evidence: str
    detail: str = ""
    applies: bool = True
    tests: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES or self.severity not in SEVERITIES:
            raise ValueError(f"row {self.key}: bad status/severity {self.status}/{self.severity}")


def module_name(obj: Any) -> str:
    """The name of the module `obj`'s class was defined in ("" where it has none, or not a string)."""
    name = getattr(type(obj), "__module__", None)
    return name if isinstance(name, str) else ""


@dataclass(frozen=True)
class Detector:
    """A ledger entry: the path's general row, and `detect(model, inputs)` -> its row for this model, or None."""

    ledger: Row
    detect: Callable[[nn.Module, Any], "Row | None"]

    @property
    def key(self) -> str:
        return self.ledger.key

    def row_for(self, model: nn.Module, inputs: Any) -> Row:
        """The detector's row when the path applies; the ledger row marked `applies=False` otherwise."""
        try:
            found = self.detect(model, inputs)
        except Exception as exc:  # a detector that cannot read this model: the row says so, the doctor goes on
            return replace(self.ledger, applies=True, status="not_tested", severity="warning",
                           detail=f"the detector could not inspect this model ({type(exc).__name__}: {exc})"[:300])
        if found is None:
            return replace(self.ledger, applies=False, detail="")
        if found.key != self.key:
            raise ValueError(f"detector for {self.key!r} returned row {found.key!r}")
        return replace(found, applies=True)


@dataclass
class DoctorReport:
    """Every ledger row for one model: the rows that apply first, then the rest, each in ledger order."""

    model_class: str
    rows: list[Row]

    @property
    def applicable(self) -> list[Row]:
        return [r for r in self.rows if r.applies]

    def row(self, key: str) -> Row:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(f"no doctor row {key!r} in the ledger")

    def keys(self) -> list[str]:
        """Keys of the rows that apply to this model."""
        return [r.key for r in self.applicable]

    def ledger_keys(self) -> list[str]:
        """Keys of every row, applicable first."""
        return [r.key for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        return {"model_class": self.model_class, "applicable": len(self.applicable),
                "rows": [{**asdict(r), "tests": list(r.tests)} for r in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        width = max((len(r.key) for r in self.rows), default=10)
        lines = [f"torchlens-explore doctor: {self.model_class} "
                 f"({len(self.applicable)} of {len(self.rows)} ledger rows apply)"]
        for title, rows in (("applies to this model", self.applicable),
                            ("does not apply to this model", [r for r in self.rows if not r.applies])):
            lines.append(f"{title}:")
            for r in rows:
                lines.append(f"  {r.key:<{width}}  {r.status:<12} {r.severity:<7} {r.detail}".rstrip())
                lines.append(f"  {'':<{width}}  evidence: {r.evidence}")
        return "\n".join(lines)


def doctor(model: nn.Module, inputs: Any = (), detectors: tuple[Detector, ...] | None = None) -> DoctorReport:
    """Run every detector of the ledger on `model` (and its `inputs`): all rows, applicable first."""
    from .rows import DETECTORS

    rows = [d.row_for(model, inputs) for d in (DETECTORS if detectors is None else detectors)]
    ordered = [r for r in rows if r.applies] + [r for r in rows if not r.applies]
    return DoctorReport(model_class=type(model).__name__, rows=ordered)
