"""The claim ladder: the four states a trace's structure can be in, with the one wording every surface uses.

The banner, the inspector, figure captions, Model Explorer exports and the text summary all
read their words from here. Values are the plain state names, as saved in trace files.
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Mapping


class Ladder(str, Enum):
    """A trace's claim state: OBSERVED (eager), or HYPOTHESIS -> CORROBORATED | REFUTED (structure-only)."""

    OBSERVED = "OBSERVED"
    HYPOTHESIS = "HYPOTHESIS"
    CORROBORATED = "CORROBORATED"
    REFUTED = "REFUTED"

    @property
    def wording(self) -> str:
        """One line after the state name: what the state means for this trace's shapes and values."""
        return _WORDING[self]

    @property
    def description(self) -> str:
        """The longer explanation: how a trace gets to this state and what it may be used for."""
        return _DESCRIPTION[self]

    @property
    def headline(self) -> str:
        """`STATE: wording`, the sentence the banner, captions and the inspector show."""
        return f"{self.value}: {self.wording}"

    @classmethod
    def of(cls, state: object) -> "Ladder | None":
        """The member for a state name (or member); None for anything else."""
        try:
            return cls(state)
        except ValueError:
            return None


_WORDING = {
    Ladder.OBSERVED: "captured eagerly; shapes were measured on real values",
    Ladder.HYPOTHESIS: "shapes unproven, no values exist (weights-free capture)",
    Ladder.CORROBORATED: "structure matched a real capture; this trace holds no values",
    Ladder.REFUTED: "a real capture contradicted this structure; do not rely on it",
}

_DESCRIPTION = {
    Ladder.OBSERVED: "Captured from a real forward: every op ran, and its shapes, dtypes and values were observed.",
    Ladder.HYPOTHESIS: ("Captured on the meta device: shapes and dtypes are hypotheses until discharged against "
                        "a real capture of the same twin (trace.discharge_against)."),
    Ladder.CORROBORATED: ("Every structural claim was checked against a real capture of the same twin and held; "
                          "the values stay with the twin, this trace holds none."),
    Ladder.REFUTED: ("A real capture of the same twin contradicted these claims; the envelope's discharge record "
                     "names the first contradiction."),
}


def ladder_headline(state: object) -> str:
    """`STATE: wording` for a state name; an unknown state is named as it is."""
    member = Ladder.of(state)
    return member.headline if member is not None else f"{state}: unrecognised ladder state"


def ladder_description(state: object) -> str:
    """The longer explanation for a state name ("" for an unknown state)."""
    member = Ladder.of(state)
    return member.description if member is not None else ""


def contradiction_text(c: Any) -> str:
    """A discharge's contradiction record as one sentence: where, why, and what was claimed vs observed."""
    if not isinstance(c, Mapping):
        return str(c)
    where = f"{c.get('table')}[{c.get('position')}]" if c.get("position") is not None else str(c.get("table", ""))
    text = f"{where} {c.get('reason', '')}".strip()
    if "field" in c:
        text += f": {c['field']} claimed {c.get('claimed')!r}, observed {c.get('observed')!r}"
    if c.get("reason") == "record counts differ":
        text += f" (claimed {c.get('claimed_count')}, observed {c.get('observed_count')})"
    row = c.get("claimed_row") or c.get("observed_row")
    if c.get("table") == "ops" and row:
        text += f" at op {row[0]}"
    return text
