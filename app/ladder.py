"""The claim-ladder state as the app shows it: one headline and one detail line per state.

Read from the trace's evidence envelope (or the one a discharge report carries), as far as this process
believes it (`tracer.claims.believed_state`: a state a discharge here did not mint for this trace reads
HYPOTHESIS); the headline is `tracer.claims.Ladder`'s one wording, which the inspector, figure captions and
exports use too. A loaded trace is HYPOTHESIS; what its file says it was when saved is added, unverified.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from exporters.bokeh_graph import caption_for
from tracer.claims.envelope import relaxations_text
from tracer.claims.ladder import Ladder, contradiction_text, ladder_headline
from tracer.claims.seal import believed_state, state_when_saved


@dataclass(frozen=True)
class LadderView:
    """What the banner says: the state, a headline, and one line of evidence."""

    state: str
    headline: str
    detail: str
    warnings: tuple[str, ...] = ()  # the trace's own warnings (fast paths not taken, foreign kernels, ...)


def ladder_view(trace: Any, report: Any = None) -> LadderView:
    """The banner text for `trace`, or for the envelope a discharge `report` carries when given."""
    env = getattr(report, "envelope", None) or getattr(trace, "envelope", None)
    state = str(believed_state(trace, env) if env is not None else getattr(trace, "ladder_state", Ladder.OBSERVED.value))
    headline = ladder_headline(state)
    if state == Ladder.OBSERVED:
        saved = len(getattr(trace, "values", {}) or {})
        detail = f"{len(trace.ops):,} ops recorded from a real forward; {saved:,} op values saved."
    elif state == Ladder.HYPOTHESIS:
        detail = (f"Structure-only capture on the meta device: {len(trace.ops):,} ops, "
                  f"{trace.param_count():,} declared parameters. Discharge against a real twin to test it.")
        saved = state_when_saved(env)
        if saved is not None:
            detail += (f" Its file says it was {saved['state']} when saved ({saved.get('at')}); a loaded state is "
                       "not re-verified: discharge again to re-derive it.")
    elif state == Ladder.CORROBORATED:
        record = _discharge_record(env)
        against = record.get("against") or {}
        counts = getattr(report, "claimed_counts", None) or (env.counts if hasattr(env, "counts") else {})
        relaxed = relaxations_text(record.get("constants_folded"))  # what was not compared position by position
        detail = (f"Discharged against a real {against.get('model_class', 'twin')} capture"
                  + (f" ({against['captured_at']})" if against.get("captured_at") else "")
                  + ": every claim holds (" + ", ".join(f"{n:,} {k}" for k, n in dict(counts).items()) + ")."
                  + (f" Not compared position by position: {relaxed}." if relaxed else "")
                  + " The values stay with the twin; this trace still holds none.")
    elif state == Ladder.REFUTED:
        record = _discharge_record(env)
        first = getattr(report, "contradiction", None) or record.get("contradiction")
        detail = "First contradiction: " + (contradiction_text(first) if first else "see the discharge report.")
    else:
        detail = ""
    return LadderView(state, headline, detail, tuple(getattr(trace, "warnings", ()) or ()))


def caption(trace: Any) -> str:
    """The one-line figure caption for the trace's state (the exporters' wording)."""
    return caption_for(trace)


def report_rows(report: Any) -> list[dict[str, str]]:
    """Per-claim-table rows of a discharge result: claims, claimed and observed counts, status."""
    if report is None:
        return []
    claimed = dict(getattr(report, "claimed_counts", {}) or {})
    observed = dict(getattr(report, "observed_counts", {}) or {})
    first = getattr(report, "contradiction", None)
    first = dict(first) if isinstance(first, Mapping) else first
    rows = []
    for table in sorted(set(claimed) | set(observed), key=lambda t: ("ops", "params", "modules", t).index(t) if t in ("ops", "params", "modules") else 3):
        hit = first is not None and first.get("table") == table
        rows.append({"claims": table, "claimed": str(claimed.get(table, "-")), "observed": str(observed.get(table, "-")),
                     "status": "REFUTED: " + contradiction_text(first) if hit else
                     ("holds" if first is None else "not reached (joined up to the first contradiction)"
                      if _after(table, first) else "holds")})
    return rows


def _after(table: str, first: dict) -> bool:
    order = ("ops", "params", "modules")
    try:
        return order.index(table) > order.index(first.get("table"))
    except ValueError:
        return False


def _discharge_record(env: Any) -> dict:
    record = getattr(env, "discharge", None)
    return dict(record) if isinstance(record, Mapping) else {}
