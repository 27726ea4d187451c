"""The evidence envelope and the claim ladder of structure-only traces.

Every structure-only trace carries one immutable, digest-sealed `EvidenceEnvelope`. Its claims
start as HYPOTHESIS; only `discharge` (`Trace.discharge_against`) promotes them to CORROBORATED
or records REFUTED with the first structural contradiction, and only its envelopes carry the seal
(`tracer.claims.seal`) that makes a trace read above HYPOTHESIS. A loaded envelope is HYPOTHESIS again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping

from .join import TABLES, claim_table, folded_join, join, plain_json, table_digests
from .ladder import Ladder
from .seal import believed_state, check_attachable, is_discharged, mint, sealed_structure, structure_digest
from .twin import twin_mismatches
from ..digest import canonical_json, canonical_object_json, canonical_rows_json, text_digest
from ..errors import (DischargePreflightError, EnvelopeFieldLockedError, EnvelopeTamperedError, InvalidInputError,
                     NotCorroboratedError, NotStructureOnlyError, SimulatedDeviceMismatchError,
                     StructureOnlyMeasurementsError, ValuesMissingError)
from ..ir import Trace
from ..gc_policy import gc_paused
from ..tensor_stats import tensor_stats

HYPOTHESIS = Ladder.HYPOTHESIS.value
CORROBORATED = Ladder.CORROBORATED.value
REFUTED = Ladder.REFUTED.value
OBSERVED = Ladder.OBSERVED.value
LADDER_STATES = (HYPOTHESIS, CORROBORATED, REFUTED)  # the states an envelope can hold
ENVELOPE_SCHEMA = 2  # 2: ambient_modes and wrap_generation (a schema-1 file loads with both None)
# What only a discharge (or sealing and loading) writes: `evolve` refuses to change these.
LOCKED_FIELDS = ("ladder_state", "discharge", "claims", "claim_digests", "history", "ambient_modes",
                 "wrap_generation", "schema", "digest")
AMBIENT_FIELDS = ("ambient_modes", "wrap_generation")  # what surrounded the capture (tracer.claims.ambient)


@dataclass(frozen=True)
class EvidenceEnvelope:
    """One sealed record of what a structure-only trace claims and how far the claims are proven.

    Nested values are frozen (tuples, read-only mappings); change means a new envelope
    (`evolve`), sealed with a fresh digest over everything else.
    """

    mode: str
    substrate: str
    values_available: bool
    outcome: str
    input_plan: Any
    twin: Any
    claims: Any  # {"ops": rows, "params": rows, "modules": rows}
    claim_digests: Any
    ladder_state: str
    discharge: Any = None
    plan_checks: Any = ()
    history: Any = ()
    ambient_modes: Any = None  # torch function/dispatch modes, grad, inference, autocast around the capture
    wrap_generation: Any = None  # the Function.apply pass-through generation the capture ran under
    schema: int = ENVELOPE_SCHEMA
    digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, digest included (what the store saves)."""
        plain = _plain_but_claims(self)
        plain["claims"] = _thaw(self.claims)
        return plain

    def evolve(self, event: str, **changes: Any) -> "EvidenceEnvelope":
        """A new sealed envelope with `changes` applied and `event` appended to its history.

        Refuses (typed) to change a locked field (`LOCKED_FIELDS`: the ladder state, the discharge record,
        the claims, the history); a discharged envelope takes only plan audits, and keeps its seal.
        """
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise InvalidInputError(f"an evidence envelope has no field {', '.join(unknown)}", site=f"evolve({event!r})")
        locked = [name for name in LOCKED_FIELDS if name in changes]
        if locked:
            raise EnvelopeFieldLockedError(f"evolve cannot change {', '.join(locked)}: only discharge_against moves "
                                           "a trace on the ladder", site=f"evolve({event!r})", fields=locked)
        bound = sealed_structure(self, fresh=True) if is_discharged(self) else None
        if bound is not None and set(changes) - {"plan_checks"}:
            raise EnvelopeFieldLockedError(
                f"a {self.ladder_state} envelope records what was discharged; evolve may add plan audits to it, "
                f"not change {', '.join(sorted(set(changes) - {'plan_checks'}))}", site=f"evolve({event!r})",
                fields=sorted(changes))
        new = _evolved(_plain_but_claims(self), event, changes, source=self)
        return mint(new, bound) if bound is not None else new

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(rows) for name, rows in self.claims.items()}

    def __repr__(self) -> str:
        c = self.counts
        state = str(self.ladder_state)
        if is_discharged(self) and sealed_structure(self) is None:
            state += " (not minted by a discharge in this process: not believed)"
        return (f"<EvidenceEnvelope {self.mode} on {self.substrate}: {c.get('ops', 0)} op, {c.get('params', 0)} "
                f"param, {c.get('modules', 0)} module claims; {state}; digest {str(self.digest)[:12]}>")


def seal_new_envelope(trace: Trace) -> EvidenceEnvelope:
    """The envelope of a freshly captured structure-only trace (HYPOTHESIS)."""
    twin = _thaw(trace.provenance.twin or {})
    ambient = {name: twin.pop(name, None) for name in AMBIENT_FIELDS}  # their own sealed fields, not the twin's
    if ambient["ambient_modes"] is None:  # a trace whose twin was described elsewhere: read at sealing
        from .ambient import ambient_modes, wrap_generation

        ambient = {"ambient_modes": {**ambient_modes(), "read_at": "seal"}, "wrap_generation": wrap_generation()}
    twin["simulated_device"] = (trace.provenance.options or {}).get("simulate_device")  # what the model saw
    table = claim_table(trace)  # built frozen: sealed as it is
    texts = {name: canonical_rows_json(table[name]) for name, _fields in TABLES}  # each table encoded once, no floats
    body = {
        "mode": "structure_only",
        "substrate": "meta",
        "values_available": False,
        "outcome": "captured",
        "input_plan": {
            "inputs": [[op.io_path, list(op.out.shape), op.out.dtype, op.out.device] for op in trace.inputs
                       if op.out is not None],
            "use_cache": twin.get("use_cache"),
            "attention_mask": twin.get("attention_mask"),
        },
        "twin": twin,
        "claims": table,
        "claim_digests": {name: text_digest(text) for name, text in texts.items()},
        "ladder_state": HYPOTHESIS,
        "discharge": None,
        "plan_checks": [],
        "history": [{"event": "sealed", "at": _now(), "ladder_state": HYPOTHESIS}],
        **ambient,
        "schema": ENVELOPE_SCHEMA,
    }
    return _seal(body, encoded={"claims": canonical_object_json(texts)}, frozen={"claims": MappingProxyType(table)})


def envelope_from_dict(data: Mapping[str, Any]) -> EvidenceEnvelope:
    """Verify a saved envelope's digest (fail-closed) and return it reset to HYPOTHESIS."""
    names = {f.name for f in fields(EvidenceEnvelope)}
    if isinstance(data, Mapping) and data.get("schema") == 1:  # before the ambient fields: sealed without them
        names -= set(AMBIENT_FIELDS)
    if not isinstance(data, Mapping) or set(data) != names:
        got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
        raise EnvelopeTamperedError(f"the evidence envelope has the wrong fields ({got})", site="envelope",
                                    expected=sorted(names))
    body = _thaw({k: v for k, v in data.items() if k != "digest"})
    texts = {k: canonical_json(v) for k, v in body.items()}  # each value encoded once: checked, then sealed
    computed = text_digest(canonical_object_json(texts))
    if data.get("schema") not in (1, ENVELOPE_SCHEMA) or computed != data.get("digest"):
        raise EnvelopeTamperedError("the evidence envelope does not match its digest", site="envelope",
                                    recorded=data.get("digest"), computed=computed)
    if data["ladder_state"] not in LADDER_STATES or table_digests(data["claims"]) != dict(data["claim_digests"]):
        raise EnvelopeTamperedError("the evidence envelope's claim table is inconsistent", site="envelope")
    for name in AMBIENT_FIELDS:  # a schema-1 file: not recorded
        body.setdefault(name, None)
    body["schema"] = ENVELOPE_SCHEMA
    loaded = _seal(body, encoded={k: v for k, v in texts.items() if k != "schema"})
    return _evolved(_plain_but_claims(loaded), "loaded", {"ladder_state": HYPOTHESIS, "discharge": None}, source=loaded)


# -- discharge -----------------------------------------------------------------------------
@dataclass(frozen=True)
class DischargeResult:
    """What a discharge found: the new ladder state, counts and the first contradiction (if any)."""

    state: str
    claimed_counts: Mapping[str, int]
    observed_counts: Mapping[str, int]
    contradiction: Mapping[str, Any] | None
    envelope_digest: str
    envelope: "EvidenceEnvelope | None" = None  # the discharged envelope: `structure.with_envelope(result.envelope)`
    folded: Mapping[str, int] | None = None  # constant-only ops folded, ops found reordered (see join.folded_join)

    def __str__(self) -> str:
        if self.contradiction is None:
            text = f"{self.state}: every claim holds ({dict(self.claimed_counts)})"
            relaxed = relaxations_text(self.folded)
            return text + (f"; {relaxed}" if relaxed else "")
        c = self.contradiction
        where = f" at {c.get('table')}[{c.get('position')}]" if c.get("position") is not None else ""
        what = f": {c['field']} claimed {c['claimed']!r}, observed {c['observed']!r}" if "field" in c else ""
        reason = c.get("reason")
        if c.get("claimed_site") is not None and c.get("claimed_site") == c.get("observed_site"):
            reason = "one line took a different path on each side: a branch on the device type or dtype?"
            if c.get("simulated_device") is None:
                reason += " (the weights-free trace simulated no device: recapture it with simulate_device=<the twin's device>)"
            what += f" at {c['claimed_site']}"
        return f"{self.state}{where} ({reason}){what}"


def relaxations_text(folded: Mapping[str, int] | None) -> str:
    """What a corroborating discharge compared other than position by position (`DischargeResult.folded`,
    the envelope's `discharge["constants_folded"]`), in words; "" when nothing."""
    folded = folded or {}
    parts = []
    if folded.get("claimed_constant_ops") or folded.get("observed_constant_ops"):
        parts.append(f"constant-only subgraphs compared by the values they feed ({folded['claimed_constant_ops']} "
                     f"claimed ops, {folded['observed_constant_ops']} observed: one side read a tensor computed "
                     "outside this forward, e.g. a cache)")
    if folded.get("reordered_ops"):
        parts.append(f"{folded['reordered_ops']} ops ran at other positions, each with the same kind, shape, "
                     "parameters and ancestry on both sides (independent ops in another order, e.g. a loop over a "
                     "set of strings, whose order follows the process's hashing)")
    return "; ".join(parts)


def discharge(structure: Trace, real: Trace) -> DischargeResult:
    """Join every claim of `structure` with a real capture; the only way up the ladder.

    Refuses unless the two are comparable twins. Changes neither trace: the result carries
    the new envelope (`structure.with_envelope(result.envelope)` is the discharged trace).
    """
    env = _envelope_of(structure, "discharge_against")
    check_attachable(structure, env, site="discharge_against")  # its claims are this trace's, as sealed
    if real.envelope is not None or real.structure_only:
        raise DischargePreflightError("the other side is structure-only too; claims are discharged against a real "
                                      "capture", site="discharge_against(real)",
                                      mismatches=[{"field": "real.values_available", "structure": False, "real": False}])
    observed_twin = real.provenance.twin
    if not observed_twin:
        raise DischargePreflightError("the real trace records no twin descriptor (config, versions, modes, inputs)",
                                      site="discharge_against(real)", mismatches=[{"field": "twin", "real": None}])
    plain = _plain_but_claims(env)  # the claims are joined frozen and kept as they are
    _check_device(plain["twin"], observed_twin)
    mismatches = twin_mismatches(plain["twin"], observed_twin)
    if mismatches:
        names = ", ".join(m["field"] + (f" ({m['module']})" if "module" in m else "") for m in mismatches)
        raise DischargePreflightError(f"the twins are not comparable: {names} differ", site="discharge_against(real)",
                                      mismatches=mismatches)
    observed = claim_table(real)
    claimed = env.claims
    contradiction = join(claimed, observed, plain=True)  # both sides are frozen rows (tuples)
    folded = None
    if contradiction is not None:
        refolded, folded = folded_join(claimed, observed)
        if refolded is None:  # the only differences lie in constant-only subgraphs (a cache on one side)
            contradiction = None
        else:
            contradiction = plain_json(contradiction)  # rows and fields as lists, as JSON reads them back
            _add_sites(contradiction, structure, real)
            contradiction["simulated_device"] = plain["twin"].get("simulated_device")
            folded = None
    state = CORROBORATED if contradiction is None else REFUTED
    record = {"state": state, "against": {"model_class": real.model_class,
                                         "captured_at": real.provenance.captured_at,
                                         "claim_digests": table_digests(observed)},
              "contradiction": contradiction, "constants_folded": folded}
    new = mint(_evolved(plain, "discharged", {"ladder_state": state, "discharge": record}, source=env),
               structure_digest(structure, fresh=True))
    return DischargeResult(state=state, claimed_counts=env.counts,
                           observed_counts={k: len(v) for k, v in observed.items()},
                           contradiction=contradiction, envelope_digest=new.digest, envelope=new, folded=folded)


def _check_device(claimed: Mapping[str, Any], observed: Mapping[str, Any]) -> None:
    """Refuse a twin on another device type than the one the weights-free capture simulated."""
    simulated, real = claimed.get("simulated_device"), observed.get("device")
    if simulated and real and str(simulated).split(":")[0] != real:
        raise SimulatedDeviceMismatchError(
            f"the weights-free trace simulated the device {simulated!r} (device branches took its path); the "
            f"real twin ran on {real!r}", site="discharge_against(real)",
            remedy=f"Recapture the weights-free trace with CaptureOptions(structure_only=True, "
                   f"simulate_device={real!r}), or capture the twin on {simulated!r}.",
            mismatches=[{"field": "device", "structure": simulated, "real": real}])


def _add_sites(contradiction: dict[str, Any], structure: Trace, real: Trace) -> None:
    """Name the source line of each side's differing op: one line taking two paths is a branch (device, dtype)."""
    position = contradiction.get("position")
    if contradiction.get("table") != "ops" or position is None:
        return
    for side, trace in (("claimed_site", structure), ("observed_site", real)):
        op = trace.ops[position] if position < len(trace.ops) else None
        contradiction[side] = str(op.source) if op is not None and op.source is not None else None


def require_corroborated(trace: Trace, what: str) -> None:
    """Refuse `what` unless the trace is eager (OBSERVED) or its claims are CORROBORATED (by a discharge this
    process minted for this trace: checked afresh, not memoised)."""
    state = believed_state(trace, fresh=True)
    if state not in (OBSERVED, CORROBORATED):
        raise NotCorroboratedError(f"{what} needs corroborated structure; this trace is {state}", site=what,
                                   ladder_state=state)


# -- measurement-shaped output ---------------------------------------------------------------
def require_values(trace: Trace, what: str) -> None:
    """Refuse a measurement on a trace without values (structure-only: typed, always)."""
    if trace.structure_only or (trace.envelope is not None and not trace.envelope.values_available):
        raise StructureOnlyMeasurementsError(
            f"{what} is a measurement; a structure-only trace has no values (bytes and FLOPs are available "
            f"as labelled estimates: tracer.estimates)", site=what, ladder_state=trace.ladder_state)


def activation_stats(trace: Trace, label: str) -> dict[str, float]:
    """Mean, std, min, max, norm and non-finite count of one op's saved output (`tensor_stats`)."""
    require_values(trace, f"activation_stats({label!r})")
    value = trace.values.get(label)
    if value is None:
        raise ValuesMissingError(f"no saved value for {label!r}", site=label)
    return tensor_stats(value)


def timings(trace: Trace) -> dict[str, float]:
    """Measured wall time of the capture (refused on structure-only traces: nothing real ran)."""
    require_values(trace, "timings")
    seconds = trace.provenance.capture_seconds
    return {"capture_seconds": float("nan") if seconds is None else float(seconds)}


def memory_peak(trace: Trace) -> int:
    """Peak activation memory of the forward (refused on structure-only traces)."""
    require_values(trace, "memory_peak")
    return sum(int(v.numel() * v.element_size()) for v in trace.values.values())


# -- plans --------------------------------------------------------------------------------
def check_plan(trace: Trace, plan: list) -> Any:
    """Audit `[(site, tensor), ...]` against the trace's intervention sites; returns the report (the trace is unchanged).

    To keep the audit with a structure-only trace: `trace.with_envelope(plan_checked(trace.envelope, report))`.
    """
    from .plan import audit_plan

    return audit_plan(trace, plan)


def plan_checked(envelope: EvidenceEnvelope, report: Any) -> EvidenceEnvelope:
    """A new envelope recording a plan audit (`check_plan`'s report) in its history."""
    return envelope.evolve("plan_checked", plan_checks=_thaw(envelope.plan_checks) + [report.to_dict()])


def saved_envelope(trace: Trace) -> dict[str, Any]:
    """The trace's envelope as the store writes it, after checking it is this trace's and, when it states a
    discharge, minted by one in this process (`check_attachable`: typed refusals)."""
    check_attachable(trace, trace.envelope, site="save(envelope)")
    return trace.envelope.to_dict()


def _envelope_of(trace: Trace, what: str) -> EvidenceEnvelope:
    if trace.envelope is None:
        raise NotStructureOnlyError(f"{what} needs a structure-only trace with an evidence envelope; this trace is "
                                    f"{trace.ladder_state}", site=what)
    return trace.envelope


# -- sealing ------------------------------------------------------------------------------
def _seal(body: dict[str, Any], encoded: Mapping[str, str] | None = None,
          frozen: Mapping[str, Any] | None = None) -> EvidenceEnvelope:
    """`body` frozen and sealed; `encoded` holds canonical JSON texts of some of its values, already made,
    `frozen` read-only forms of some of its values, already made (stored as they are).

    The digest is that of `canonical_json(body)`, composed from each value's text; the claims' text is
    kept on the envelope (`_CLAIMS_TEXT`, not a field) so that `evolve` need not encode them again.
    """
    encoded, frozen = encoded or {}, frozen or {}
    texts = {k: encoded[k] if k in encoded else canonical_json(v) for k, v in body.items() if k != "digest"}
    digest = text_digest(canonical_object_json(texts))
    with gc_paused():  # 10,000s of small acyclic containers for an 8B model's claims
        envelope = EvidenceEnvelope(**{k: frozen[k] if k in frozen else _freeze(body[k]) for k in texts}, digest=digest)
    object.__setattr__(envelope, _CLAIMS_TEXT, texts["claims"])
    return envelope


_CLAIMS_TEXT = "_claims_text"  # an instance attribute outside the dataclass fields: not saved, not compared


def _plain_but_claims(envelope: EvidenceEnvelope) -> dict[str, Any]:
    """`to_dict()` without thawing the claims (they stay the envelope's frozen rows)."""
    return {f.name: envelope.claims if f.name == "claims" else _thaw(getattr(envelope, f.name)) for f in fields(envelope)}


def _evolved(plain: dict[str, Any], event: str, changes: Mapping[str, Any], *,
             source: EvidenceEnvelope) -> EvidenceEnvelope:
    """A new sealed envelope from `source`'s thawed body (`plain`: its claims still `source`'s frozen rows),
    `changes` applied and `event` appended to its history; unchanged claims are kept, not encoded again."""
    entry = {"event": event, "at": _now(), "ladder_state": changes.get("ladder_state", plain["ladder_state"])}
    body = {**plain, **{k: _thaw(v) for k, v in changes.items()}}
    body["history"] = [*plain["history"], entry]
    text = getattr(source, _CLAIMS_TEXT, None)  # None: an envelope not made by _seal (a dataclasses.replace)
    if "claims" in changes or text is None:
        if "claims" not in changes:
            body["claims"] = _thaw(source.claims)
        return _seal(body)
    return _seal(body, encoded={"claims": text}, frozen={"claims": source.claims})


# Leaves and plain lists, tuples and dicts are told by exact type first: the claim table of an 8B
# model has 10,000s of them, and the `Mapping` check (an ABC) costs ten times a type lookup.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _freeze(value: Any) -> Any:
    """Read-only nested copy (mappings -> MappingProxyType, sequences -> tuples); leaves pass as they are."""
    t = type(value)
    if t is list or t is tuple:  # a list built, then made a tuple: a generator into tuple() costs a third more
        return tuple([v if type(v) in _LEAVES else _freeze(v) for v in value])
    if t is dict or t is MappingProxyType or (t not in _LEAVES and isinstance(value, Mapping)):
        return MappingProxyType({k: v if type(v) in _LEAVES else _freeze(v) for k, v in value.items()})
    return value


_thaw = plain_json  # frozen or tuple-bearing values back to plain JSON shapes (one linear pass)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
