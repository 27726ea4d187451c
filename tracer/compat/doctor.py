"""`doctor(model, inputs)`: the compatibility report, one row per deployment path.

Rows come from a registry of small detectors `(model, inputs) -> Row | None` in
`tracer.compat.rows`; adding a path is one function plus `@register`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from torch import nn

STATUSES = ("pass", "not_tested", "known_broken", "scope")
SEVERITIES = ("info", "warning", "error")

Detector = Callable[[nn.Module, Any], "Row | None"]
_REGISTRY: list[tuple[str, Detector]] = []


@dataclass(frozen=True)
class Row:
    """One finding: stable key, status, severity, and an evidence sentence naming its test."""

    key: str
    status: str
    severity: str
    evidence: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES or self.severity not in SEVERITIES:
            raise ValueError(f"row {self.key}: bad status/severity {self.status}/{self.severity}")


@dataclass
class DoctorReport:
    """The rows that apply to one model, in registry order."""

    model_class: str
    rows: list[Row] = field(default_factory=list)

    def row(self, key: str) -> Row:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(f"no doctor row {key!r} in this report")

    def keys(self) -> list[str]:
        return [r.key for r in self.rows]

    def to_json(self) -> str:
        return json.dumps({"model_class": self.model_class, "rows": [asdict(r) for r in self.rows]}, indent=2)

    def to_text(self) -> str:
        width = max((len(r.key) for r in self.rows), default=10)
        lines = [f"torchlens-explore doctor: {self.model_class}"]
        for r in self.rows:
            lines.append(f"  {r.key:<{width}}  {r.status:<12} {r.severity:<7} {r.detail}".rstrip())
            lines.append(f"  {'':<{width}}  evidence: {r.evidence}")
        return "\n".join(lines)


def register(key: str) -> Callable[[Detector], Detector]:
    """Decorator adding a detector under a stable `key` (re-registering a key replaces it)."""
    def add(fn: Detector) -> Detector:
        for i, (k, _) in enumerate(_REGISTRY):
            if k == key:
                _REGISTRY[i] = (key, fn)
                return fn
        _REGISTRY.append((key, fn))
        return fn

    return add


def registered_keys() -> list[str]:
    from . import rows  # noqa: F401  (registers the built-in rows)

    return [k for k, _ in _REGISTRY]


def doctor(model: nn.Module, inputs: Any = ()) -> DoctorReport:
    """Run every registered detector on `model` (and its `inputs`); rows that apply, in order."""
    from . import rows  # noqa: F401

    report = DoctorReport(model_class=type(model).__name__)
    for key, detect in _REGISTRY:
        row = detect(model, inputs)
        if row is not None:
            if row.key != key:
                raise ValueError(f"detector for {key!r} returned row {row.key!r}")
            report.rows.append(row)
    return report
