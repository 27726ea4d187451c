"""Where a trace came from and what the capture found: one typed, frozen record, built once.

`tracer.trace` collects every finding (admission, twin, witness census, deployment bridges,
foreign-kernel boundaries) into a `Findings` while it assembles the trace, then freezes them
into the trace's `Provenance`. Nothing writes into it afterwards; a wrapper that knows more
(the config a trace came from, the text route) makes a new trace with `Trace.with_provenance`.

Read access by key (`provenance["witness"]`, `.get`, `in`) matches the saved JSON: a field
that was not set (None, or empty) reads as absent.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterator, Mapping

# Keys older files carry that are reports, not provenance (validation and plan audits are returned now).
_LEGACY_REPORT_KEYS = frozenset({"validation", "plan_checks"})


@dataclass(frozen=True, slots=True)
class Provenance:
    """What produced a trace and what its capture found (see the module docstring).

    The record is frozen; its mapping fields are plain JSON-shaped copies made at construction,
    to be read, not changed (`replace` or `Trace.with_provenance` make a new record).
    """

    model_class: str = ""
    model_module: str = ""
    options: Mapping[str, Any] | None = None  # CaptureOptions.describe()
    structure_only: bool = False
    admission: Mapping[str, Any] | None = None  # the admission gate's mode and reason
    versions: Mapping[str, str] | None = None  # torch, python, transformers
    capture_seconds: float | None = None
    captured_at: str | None = None
    twin: Mapping[str, Any] | None = None  # tracer.claims.twin.describe_twin
    verified: bool = True  # False when a finding says the trace is not a complete record
    unverified_reasons: tuple[str, ...] = ()
    unverified_ops: tuple[str, ...] = ()
    witness: Mapping[str, Any] | None = None  # the dispatch census, when CaptureOptions(witness=True)
    foreign_kernels: Mapping[str, Mapping[str, str]] | None = None  # op label -> boundary kind and name
    offload: Mapping[str, Any] | None = None  # accelerate offload evidence
    deferred_args: bool = False  # live calls hold offloaded weights by reference (replay reloads them)
    quantization: Mapping[str, Any] | None = None  # bitsandbytes layers and the ops reading their state
    config_source: str | None = None  # the config a weights-free trace was built from
    text_route: Mapping[str, Any] | None = None  # trace_text: prompts, tokens, mask policy
    summary: Mapping[str, Any] | None = None  # tracer.summary: how the capture mode was chosen
    # module address -> the fused kernel the plain forward runs there and capture did not (capture.fast_paths)
    fast_paths: Mapping[str, Any] | None = None
    distributed: Mapping[str, Any] | None = None  # rank, world size, backend, meshes (tracer.distributed)
    compiled: Mapping[str, Any] | None = None  # torch.compile regions traced as their eager graph (capture.compiled)

    def __post_init__(self) -> None:
        for name in _MAPPINGS:  # own plain copies: JSON-shaped, and not shared with the parts that found them
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, plain_data(value))
        for name in ("unverified_reasons", "unverified_ops"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    # -- read access by key, as saved ---------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form (unset fields left out; tuples as lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if _is_set(f.name, value):
                out[f.name] = plain_data(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Provenance":
        """Rebuild from `to_dict` output; unknown keys raise ValueError (legacy report keys are dropped)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"provenance must be an object, got {type(data).__name__}")
        names = {f.name: f for f in fields(cls)}
        unknown = sorted(str(k) for k in data if k not in names and k not in _LEGACY_REPORT_KEYS)
        if unknown:
            raise ValueError(f"unknown provenance field(s): {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key in _LEGACY_REPORT_KEYS:
                continue
            values[key] = _typed(key, value)
        try:
            return cls(**values)
        except RecursionError:
            raise ValueError("provenance is nested too deeply") from None

    def replace(self, **changes: Any) -> "Provenance":
        """A copy with `changes` (the record itself never changes)."""
        return replace(self, **changes)

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if key in _NAMES else None
        if not _is_set(key, value):
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in _NAMES and _is_set(key, getattr(self, key))

    def keys(self) -> list[str]:
        return [name for name in _NAMES if _is_set(name, getattr(self, name))]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


_NAMES = tuple(f.name for f in fields(Provenance))
_MAPPINGS = ("distributed", "options", "admission", "versions", "twin", "witness", "foreign_kernels", "offload", "quantization",
             "text_route", "summary", "fast_paths", "compiled")


def _is_set(name: str, value: Any) -> bool:
    if name == "structure_only":
        return True  # always recorded
    if name == "verified":
        return value is False
    if name == "deferred_args":
        return bool(value)
    return value is not None and value != () and value != {} and value != ""


def plain_data(value: Any) -> Any:
    """`value` with mappings as dicts and sequences as lists (read-only views included), for JSON."""
    if isinstance(value, Mapping):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    return value


def _typed(key: str, value: Any) -> Any:
    """A saved value as its field's type (fail-closed on the wrong shape)."""
    if key in ("structure_only", "verified", "deferred_args"):
        if not isinstance(value, bool):
            raise TypeError(f"provenance {key} must be true or false")
        return value
    if key in ("unverified_reasons", "unverified_ops"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"provenance {key} must be a list of strings")
        return tuple(value)
    if key == "capture_seconds":
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError("provenance capture_seconds must be a number")
        return value
    if key in ("model_class", "model_module", "captured_at", "config_source"):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"provenance {key} must be a string")
        return value
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(f"provenance {key} must be an object")
    return value


@dataclass
class Findings:
    """What the parts of a capture found, gathered while the trace is assembled (then frozen)."""

    fields: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _reasons: list[str] = field(default_factory=list)
    _ops: list[str] = field(default_factory=list)

    def add(self, **values: Any) -> None:
        """Record provenance fields (one part owns each field)."""
        self.fields.update(values)

    def warn(self, message: str) -> None:
        """A sentence for `trace.warnings`."""
        self.warnings.append(message)

    def unverified(self, reason: str, op_labels: tuple[str, ...] | list[str] = ()) -> None:
        """Mark the trace not verified, with the reason (also a warning) and the ops it names."""
        self._reasons.append(reason)
        self._ops.extend(op_labels)
        self.warnings.append(reason)

    def provenance(self, **base: Any) -> Provenance:
        """The frozen record: `base` (what the capture was asked) plus every finding."""
        values = {**base, **self.fields}
        if self._reasons:
            values.update(verified=False, unverified_reasons=tuple(self._reasons), unverified_ops=tuple(self._ops))
        return Provenance(**values)
