"""The discharge seal: which ladder states this process believes, and for which trace.

Only `discharge` mints. It signs (HMAC-SHA256 under a random key made when this module is imported,
held here, never saved or shown) the envelope's content digest, recomputed from its fields (never
read from its `digest`), together with the structure digest of the trace it discharged: the digest of
that trace's claim table (ops, params, modules). Everything that reads a ladder state asks
`believed_state`: an envelope above HYPOTHESIS whose seal does not verify for the trace carrying it
reads HYPOTHESIS. `check_attachable` is `Trace.with_envelope`'s typed refusal of an envelope made for
another trace's claims or not minted by discharge.

A saved file carries no seal (the key dies with the process), so a loaded envelope is HYPOTHESIS
until it is discharged again (`state_when_saved` says what it was when saved, unverified). Two traces
with the same claim table (one config captured twice) share a structure digest: a discharge proves
claims, and equal claims are proven alike.

This defends against public calls: `with_envelope`, `evolve`, `dataclasses.replace`, construction,
`object.__setattr__` on an envelope's fields, assigning `trace.envelope`. `believed_state` memoises its
two digests on the identity of the envelope's fields and of the trace's ops tuple and records; the
gates that act on the state (`with_envelope`, `require_corroborated`, `discharge`, save) recompute both.
Code that reads this module's private key is outside what any in-process check can stop.
"""
from __future__ import annotations

import hashlib
import hmac
import operator
import secrets
import threading
import weakref
from collections import OrderedDict
from dataclasses import fields
from typing import Any, Mapping

from .join import TABLES, claim_table, plain_json
from .ladder import Ladder
from ..digest import canonical_json, canonical_object_json, canonical_rows_json, text_digest
from ..errors import EnvelopeBoundElsewhereError, EnvelopeNotMintedError

HYPOTHESIS, CORROBORATED, REFUTED, OBSERVED = (Ladder.HYPOTHESIS.value, Ladder.CORROBORATED.value,
                                               Ladder.REFUTED.value, Ladder.OBSERVED.value)
_DISCHARGED = (CORROBORATED, REFUTED)
_KEY = secrets.token_bytes(32)
_SEAL = "_discharge_seal"  # (structure digest, tag): an instance attribute outside the fields, never saved
_ENVELOPES: dict[int, tuple[Any, tuple, str | None]] = {}  # id -> (weakref, field snapshot, bound structure)
_STRUCTURES: "OrderedDict[int, tuple[tuple, str]]" = OrderedDict()  # id(ops) -> (parts snapshot, digest)
_STRUCTURES_KEPT = 8
_LOCK = threading.Lock()  # sessions of the app read states from several threads


# -- digests ----------------------------------------------------------------------------
def claims_digest(table: Mapping[str, Any]) -> str:
    """Digest of a claim table's canonical text, as an envelope's digest encodes its `claims`."""
    return text_digest(_claims_text(table))


def structure_digest(trace: Any, fresh: bool = False) -> str:
    """The digest a seal binds to: that of the trace's claim table (`fresh`: not memoised)."""
    if fresh:
        return claims_digest(claim_table(trace))
    parts = _parts(trace)
    key = id(trace.ops)
    with _LOCK:
        kept = _STRUCTURES.get(key)
        if kept is not None and _same(kept[0], parts):
            _STRUCTURES.move_to_end(key)
            return kept[1]
    digest = claims_digest(claim_table(trace))
    with _LOCK:
        _STRUCTURES[key] = (parts, digest)
        while len(_STRUCTURES) > _STRUCTURES_KEPT:
            _STRUCTURES.popitem(last=False)
    return digest


def content_digest(envelope: Any) -> str | None:
    """The envelope's digest recomputed from its fields (None when they cannot be encoded as sealing does)."""
    both = _digests(envelope)
    return None if both is None else both[0]


def _digests(envelope: Any) -> tuple[str, str] | None:
    """(content digest, claims digest) recomputed from the envelope's fields, the claims encoded once."""
    try:
        texts = {f.name: canonical_json(plain_json(getattr(envelope, f.name))) for f in fields(envelope)
                 if f.name not in ("digest", "claims")}
        texts["claims"] = _claims_text(envelope.claims)
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError):
        return None
    return text_digest(canonical_object_json(texts)), text_digest(texts["claims"])


def _claims_text(table: Mapping[str, Any]) -> str:
    if not isinstance(table, Mapping) or set(table) != {name for name, _ in TABLES}:
        raise KeyError("claims")
    return canonical_object_json({name: canonical_rows_json(table[name]) for name, _ in TABLES})


# -- minting and checking -------------------------------------------------------------------
def mint(envelope: Any, structure: str) -> Any:
    """Seal `envelope` (just made by discharge) to the trace whose structure digest is `structure`."""
    content = content_digest(envelope)
    if content is None or content != envelope.digest:  # sealing and this module disagree: nothing is minted
        raise EnvelopeNotMintedError("the discharged envelope could not be sealed", site="discharge_against")
    object.__setattr__(envelope, _SEAL, (structure, _tag(content, structure)))
    return envelope


def sealed_structure(envelope: Any, fresh: bool = False) -> str | None:
    """The structure digest the envelope's seal binds it to, when the seal verifies; else None."""
    from .envelope import EvidenceEnvelope

    if type(envelope) is not EvidenceEnvelope:  # a look-alike object carries no seal
        return None
    if fresh:
        return _verify(envelope)
    key = id(envelope)
    snapshot = _snapshot(envelope)
    kept = _ENVELOPES.get(key)
    if kept is not None and kept[0]() is envelope and _same(kept[1], snapshot):
        return kept[2]
    bound = _verify(envelope)
    try:
        ref = weakref.ref(envelope, lambda _r, k=key: _ENVELOPES.pop(k, None))
    except TypeError:  # not weak-referenceable: not memoised
        return bound
    _ENVELOPES[key] = (ref, snapshot, bound)
    return bound


def believed_state(trace: Any, envelope: Any = None, *, fresh: bool = False) -> str:
    """The ladder state this process believes for `trace` carrying `envelope` (default: its own).

    OBSERVED for an eager trace without an envelope (HYPOTHESIS for a structure-only one); an envelope's
    CORROBORATED or REFUTED only when its seal verifies for this trace's structure; anything else HYPOTHESIS.
    """
    env = trace.envelope if envelope is None else envelope
    if env is None:
        return HYPOTHESIS if trace.structure_only else OBSERVED
    state = getattr(env, "ladder_state", None)
    if type(state) is not str or state not in _DISCHARGED:
        return HYPOTHESIS
    bound = sealed_structure(env, fresh)
    if bound is None or bound != structure_digest(trace, fresh):
        return HYPOTHESIS
    return state


def is_discharged(envelope: Any) -> bool:
    """Whether the envelope states a discharge (a ladder state above HYPOTHESIS, or a discharge record)."""
    return getattr(envelope, "ladder_state", None) != HYPOTHESIS or getattr(envelope, "discharge", None) is not None


def check_attachable(trace: Any, envelope: Any, site: str = "with_envelope") -> None:
    """Refuse, typed, an envelope that is not this trace's: made for other claims, altered after it was
    sealed, or stating a discharge that `discharge_against` did not mint for this trace in this process."""
    from .envelope import EvidenceEnvelope

    if envelope is None:
        if trace.structure_only:
            raise EnvelopeNotMintedError("a structure-only trace keeps its evidence envelope (without one it would "
                                         "read as an eager capture)", site=site)
        return
    if type(envelope) is not EvidenceEnvelope:
        raise EnvelopeNotMintedError(f"{type(envelope).__name__} is not an evidence envelope", site=site)
    both = _digests(envelope)
    if both is None or both[0] != envelope.digest:
        raise EnvelopeNotMintedError("the envelope's fields do not match its digest (changed after it was sealed)",
                                     site=site, recorded=str(envelope.digest)[:64], computed=both and both[0])
    content, claimed = both
    table = claim_table(trace)  # compared row by row (C speed); encoded only when the rows are not equal as tuples
    if not all(envelope.claims[name] == table[name] for name, _ in TABLES) and claimed != claims_digest(table):
        counts = {name: len(rows) if isinstance(rows, (list, tuple)) else None
                  for name, rows in ((name, envelope.claims[name]) for name, _ in TABLES)}
        actual = {"ops": len(trace.ops), "params": len(trace.params), "modules": len(trace.modules)}
        raise EnvelopeBoundElsewhereError(
            f"the envelope's claims ({_counts_text(counts)}) are not this trace's ({_counts_text(actual)})"
            if counts != actual else "the envelope's claims are not this trace's (same counts, other records)",
            site=site, envelope_counts=counts, trace_counts=actual)
    if is_discharged(envelope):
        bound = _verify(envelope, content)
        if bound is None:
            raise EnvelopeNotMintedError(f"the envelope states {envelope.ladder_state}, but discharge_against did not "
                                         "mint it in this process", site=site, ladder_state=str(envelope.ladder_state))
        if bound != claimed:  # its claims are this trace's (above), so its seal must name their digest
            raise EnvelopeBoundElsewhereError("the envelope was discharged for another trace", site=site)


def state_when_saved(envelope: Any) -> dict[str, Any] | None:
    """What a loaded envelope's history says its state was when saved, if a discharge had raised or refuted it
    (`{"state", "at"}`; read from the file, not verified); None otherwise."""
    history = list(getattr(envelope, "history", ()) or ())
    events = [h.get("event") if isinstance(h, Mapping) else None for h in history]
    if "loaded" not in events:
        return None
    last = len(events) - 1 - events[::-1].index("loaded")
    before = history[last - 1] if last > 0 else None
    if isinstance(before, Mapping) and before.get("ladder_state") in _DISCHARGED:
        return {"state": before["ladder_state"], "at": before.get("at")}
    return None


def _verify(envelope: Any, content: str | None = None) -> str | None:
    """The structure digest the seal names when it verifies (`content`: the content digest, already recomputed)."""
    seal = getattr(envelope, _SEAL, None)
    if type(seal) is not tuple or len(seal) != 2 or not all(type(s) is str for s in seal):
        return None
    content = content_digest(envelope) if content is None else content
    if content is None or content != getattr(envelope, "digest", None):
        return None
    structure, tag = seal
    return structure if hmac.compare_digest(tag, _tag(content, structure)) else None


def _tag(content: str, structure: str) -> str:
    return hmac.new(_KEY, f"{content}:{structure}".encode(), hashlib.sha256).hexdigest()


def _snapshot(envelope: Any) -> tuple:
    return (*(getattr(envelope, f.name, None) for f in fields(envelope)), getattr(envelope, _SEAL, None))


def _parts(trace: Any) -> tuple:
    return (trace.ops, *trace.params.values(), None, *trace.modules.values())


def _same(a: tuple, b: tuple) -> bool:
    """Equal by identity, item by item (a field or record replaced in place is seen)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items())
