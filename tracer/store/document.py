"""trace.json framing: a header (format, schema version, digests) followed by the structure body.

The file is `{"format":F,"schema_version":V,"digest":D,"trace":BODY}` written in that order. The
structure digest is SHA-256 of BODY's bytes exactly as written, so a load checks it with one hash
instead of re-serializing; a body rewritten by another tool may instead carry the SHA-256 of its
canonical JSON (`tracer.digest`), which is checked the slow way.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from ..digest import canonical_digest
from ..errors import TraceFileCorruptError, TraceFileTamperedError, TraceSchemaError
from .format import FORMAT, READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION


class Digests(msgspec.Struct, forbid_unknown_fields=True):
    """SHA-256 (hex) of the structure body and of the values file (None when no values were saved)."""

    structure: str
    values: str | None


class _Header(msgspec.Struct):
    format: Any = None
    schema_version: Any = None
    digest: Any = None


_FRAMED = re.compile(re.escape(b'{"format":' + msgspec.json.encode(FORMAT) + b',"schema_version":'
                                + msgspec.json.encode(SCHEMA_VERSION) + b',"digest":') + rb'(\{[^{}]{0,300}\}),"trace":')


def frame(body: bytes, values_digest: str | None) -> bytes:
    """The whole trace.json for `body` (its digest computed here)."""
    return _prefix(Digests(hashlib.sha256(body).hexdigest(), values_digest)) + body + b"}"


def canonical_body_digest(body: Any) -> str:
    """The alternative structure digest: SHA-256 of the body's canonical JSON (for tools that rewrite it)."""
    return canonical_digest(body)


def unframe(raw: bytes, site: str) -> tuple[bytes, Digests, int]:
    """Check the header and the structure digest; return the body bytes, the digests and the schema version."""
    header = _framed_header(raw) or _header(raw, site)
    try:
        digests = msgspec.convert(header.digest, Digests)
    except msgspec.ValidationError as exc:
        raise TraceFileCorruptError(f"{site} has a malformed digest record ({exc})", site=site) from None
    prefix = _prefix(digests, header.schema_version)
    if raw.startswith(prefix) and raw.endswith(b"}"):
        body = raw[len(prefix):-1]
        if hashlib.sha256(body).hexdigest() == digests.structure:
            return body, digests, header.schema_version
    return _rewritten_body(raw, digests, site), digests, header.schema_version


def _framed_header(raw: bytes) -> _Header | None:
    """The header of a file written by `frame`, read from its first bytes alone (None for any other file)."""
    match = _FRAMED.match(raw)
    if match is None:
        return None
    try:
        return _Header(FORMAT, SCHEMA_VERSION, msgspec.json.decode(match.group(1)))
    except msgspec.DecodeError:
        return None


def _header(raw: bytes, site: str) -> _Header:
    try:
        header = msgspec.json.decode(raw, type=_Header)
    except msgspec.ValidationError:
        raise TraceSchemaError(f"{site} is not a torchlens-explore trace", site=site) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise TraceFileCorruptError(f"{site} is not valid JSON ({exc})", site=site) from None
    if header.format != FORMAT:
        raise TraceSchemaError(f"{site} is not a torchlens-explore trace", site=site)
    if type(header.schema_version) is not int or header.schema_version not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(map(str, sorted(READABLE_SCHEMA_VERSIONS)))
        raise TraceSchemaError(f"schema version {header.schema_version!r} is not supported (this build reads "
                               f"{readable})", site=site, remedy="Save the trace again with this version.")
    return header


def _rewritten_body(raw: bytes, digests: Digests, site: str) -> bytes:
    """The body of a file not framed byte for byte by `frame`: accepted only with a canonical digest."""
    try:
        body = msgspec.json.decode(raw)["trace"]
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, KeyError, TypeError) as exc:
        raise TraceFileCorruptError(f"{site} lacks a readable trace body ({exc.__class__.__name__})", site=site) from None
    try:
        canonical = canonical_body_digest(body)
    except (RecursionError, ValueError, TypeError) as exc:
        raise TraceFileCorruptError(f"{site} has an unreadable trace body ({exc.__class__.__name__})", site=site) from None
    if canonical != digests.structure:
        raise TraceFileTamperedError(f"{site} does not match its structure digest", site=site)
    return msgspec.json.encode(body)


def _prefix(digests: Digests, schema: int = SCHEMA_VERSION) -> bytes:
    return (b'{"format":' + msgspec.json.encode(FORMAT) + b',"schema_version":' + msgspec.json.encode(schema)
            + b',"digest":' + msgspec.json.encode(digests) + b',"trace":')
