"""Trace structure <-> JSON bytes with msgspec: IR dataclasses are encoded and decoded field by field.

Decoding goes straight into the IR classes (the ops through their columns, `tracer.store.columns`), so
every field is type-checked against its annotation (a new Op field is persisted and checked with no
change here); bounds and references are checked afterwards by `integrity`. Provenance goes through `provenance_to_json` / `provenance_from_json` alone.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Generic, Mapping, TypeVar

import msgspec

from .backward import BackwardDoc, to_doc
from ..errors import TraceSaveFailedError, TraceStructureInvalidError
from ..gc_policy import gc_paused  # also imported from here by modules written before tracer.gc_policy
from ..ir import ModuleScope, ModuleStack, Op, ParamRecord, Trace
from ..provenance import Provenance
from .columns import OpColumns, to_columns, to_ops
from .format import MAX_JSON_DEPTH, MAX_JSON_INT, SCHEMA_VERSION


O = TypeVar("O")


class Body(msgspec.Struct, Generic[O], forbid_unknown_fields=True):
    """The `trace` member of trace.json: `Body[OpColumns]` in schema 3, `Body[tuple[Op, ...]]` in schema 2."""

    model_class: str
    ops: O
    modules: tuple[ModuleScope, ...]
    params: tuple[ParamRecord, ...]
    provenance: dict[str, Any]
    warnings: tuple[str, ...]
    envelope: dict[str, Any] | None
    backward: BackwardDoc | None = None  # from CaptureOptions(backward=True): structure and bytes, no gradients


_BODY_TYPES = {3: Body[OpColumns], 2: Body[tuple[Op, ...]]}  # type: ignore[valid-type]


@dataclasses.dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded trace body: its fields with the ops as records, and the columns they came from (schema 3)."""

    model_class: str
    ops: tuple[Op, ...]
    modules: tuple[ModuleScope, ...]
    params: tuple[ParamRecord, ...]
    provenance: dict[str, Any]
    warnings: tuple[str, ...]
    envelope: dict[str, Any] | None
    backward: BackwardDoc | None
    columns: Any  # OpColumns, or None for a schema-2 body


def _encode_other(value: Any) -> Any:
    """What msgspec cannot encode itself: a linked module stack as its pairs, a mapping that is not a dict
    (an op's call template) as plain JSON data, anything else as `str`."""
    if isinstance(value, ModuleStack):
        return tuple(value)
    if isinstance(value, Mapping):
        return plain_json(dict(value))
    return str(value)


_ENCODER = msgspec.json.Encoder(enc_hook=_encode_other)
_BARE = msgspec.json.Encoder()  # no hook: refuses whatever is not JSON data already


class _BodyEncoder:
    """`_encode_other` for one body, each distinct module stack and call template made plain once.

    Templates are keyed by their JSON text: equal text means equal plain data, except that JSON writes
    NaN, infinities and None all as null, so a template whose text holds `null` is made plain on its own.
    `text` gives a value's JSON as written (an op column's table is keyed by it).
    """

    def __init__(self) -> None:
        self._stacks: dict[int, msgspec.Raw] = {}  # by id: the stacks live as long as the trace being encoded
        self._plain: dict[bytes, bytes] = {}
        self._mapping: dict[type, bool] = {}
        self.encoder = msgspec.json.Encoder(enc_hook=self)

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if kind is ModuleStack:
            hit = self._stacks.get(id(value))
            if hit is None:
                hit = self._stacks[id(value)] = msgspec.Raw(_BARE.encode(value.as_tuple()))
            return hit
        if not self._is_mapping(kind):
            return _encode_other(value)
        return msgspec.Raw(self.text(value))

    def _is_mapping(self, kind: type) -> bool:
        mapping = self._mapping.get(kind)
        if mapping is None:
            mapping = self._mapping[kind] = issubclass(kind, Mapping)
        return mapping

    def text(self, value: Any) -> bytes:
        """The JSON text `value` is written as (a mapping made plain, cached by its text)."""
        kind = type(value)
        if kind is dict:
            data = value
        elif self._is_mapping(kind):
            items = getattr(value, "items", None)  # a call template hands over its encoded dict's items at C speed
            data = dict(items()) if callable(items) else dict(value)
        else:
            return self.encoder.encode(value)
        try:
            text = _BARE.encode(data)
        except (TypeError, ValueError, OverflowError):
            return _BARE.encode(plain_json(data))
        if b"null" in text:
            return _BARE.encode(plain_json(data))
        hit = self._plain.get(text)
        if hit is None:
            hit = self._plain[text] = _BARE.encode(plain_json(data))
        return hit


def provenance_to_json(provenance: Provenance) -> dict[str, Any]:
    """The JSON form of a trace's provenance (values JSON cannot hold are written as their `str`)."""
    return plain_json(provenance.to_dict())


def provenance_from_json(data: dict[str, Any], site: str) -> Provenance:
    """A trace's typed provenance from its JSON form (plain and shallow already, checked by `integrity`)."""
    try:
        return Provenance.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise TraceStructureInvalidError(f"provenance: {exc}", site=site) from None


def plain_json(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON data the loader accepts: tuples become lists, keys strings, numbers JSON
    cannot carry (NaN, huge ints) and other objects their `str`; nesting past MAX_JSON_DEPTH a `str`."""
    kind = type(value)  # exact types first: this runs for every argument of every op
    if kind is str or value is None or kind is bool:
        return value
    if kind is int:
        return value if -MAX_JSON_INT <= value <= MAX_JSON_INT else str(value)
    if kind is float:
        return value if math.isfinite(value) else str(value)
    if depth < MAX_JSON_DEPTH - 1:
        if kind is dict:
            return {k if type(k) is str else str(k): plain_json(v, depth + 1) for k, v in value.items()}
        if kind is list or kind is tuple:
            return [plain_json(v, depth + 1) for v in value]
    if isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return int(value) if abs(value) <= MAX_JSON_INT else str(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if depth < MAX_JSON_DEPTH - 1:
        if isinstance(value, Mapping):
            return {str(k): plain_json(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain_json(v, depth + 1) for v in value]
    return str(value)


def encode_body(trace: Trace, gradients: Any = None) -> bytes:
    """The JSON bytes of a trace's structure in this build's schema (values, output and live calls are not part of it).

    `gradients`: the record of the backward's grads file (`tracer.store.backward`), when one was written.

    Free-form values (attrs, provenance, envelope) are made plain first, so what is saved always loads.
    """
    body_encoder = _BodyEncoder()
    encoder = body_encoder.encoder
    try:
        body = Body(model_class=trace.model_class, ops=_without_gc(to_columns, trace.ops, body_encoder.text),
                    modules=tuple(trace.modules.values()), params=tuple(trace.params.values()),
                    provenance=provenance_to_json(trace.provenance), warnings=tuple(trace.warnings),
                    envelope=None if trace.envelope is None else _envelope_json(trace),
                    backward=None if trace.backward is None else to_doc(trace.backward, gradients))
        return _without_gc(encoder.encode, body)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceSaveFailedError(f"the trace structure cannot be written as JSON ({exc})", site="trace") from None


def decode_body(raw: bytes, site: str, schema: int = SCHEMA_VERSION) -> Decoded:
    """Decode body bytes of `schema` into IR records, refusing any field of the wrong type (site names its path)."""
    try:
        body = _without_gc(msgspec.json.decode, raw, type=_BODY_TYPES[schema])
    except msgspec.ValidationError as exc:
        raise TraceStructureInvalidError(f"{site}: {exc}".replace("`$", "`trace"), site=site) from None
    except (msgspec.DecodeError, RecursionError, ValueError, TypeError) as exc:
        raise TraceStructureInvalidError(f"{site} is not valid JSON ({exc.__class__.__name__}: {exc})",
                                         site=site) from None
    columns = body.ops if schema >= 3 else None
    ops = body.ops if columns is None else _without_gc(to_ops, columns, site)
    return Decoded(body.model_class, ops, body.modules, body.params, body.provenance, body.warnings, body.envelope,
                   body.backward, columns)


def _envelope_json(trace: Any) -> dict[str, Any]:
    """The envelope's dict, checked to be this trace's (tracer.claims.saved_envelope: typed refusals); built
    from plain data, a msgspec round trip makes it plain."""
    from ..claims.envelope import saved_envelope

    return msgspec.json.decode(_ENCODER.encode(saved_envelope(trace)))


def _without_gc(fn, *args, **kwargs):
    with gc_paused():
        return fn(*args, **kwargs)
