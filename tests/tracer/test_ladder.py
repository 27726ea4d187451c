"""One Ladder: the four claim states, their values as saved, and one wording per state."""
from __future__ import annotations

import json

from tracer.claims import CORROBORATED, HYPOTHESIS, LADDER_STATES, OBSERVED, REFUTED, Ladder, ladder_headline


def test_values_are_the_saved_state_names():
    assert [m.value for m in Ladder] == ["OBSERVED", "HYPOTHESIS", "CORROBORATED", "REFUTED"]
    assert (OBSERVED, HYPOTHESIS, CORROBORATED, REFUTED) == tuple(m.value for m in Ladder)
    assert Ladder("HYPOTHESIS") is Ladder.HYPOTHESIS and Ladder.HYPOTHESIS == "HYPOTHESIS"
    assert json.dumps(Ladder.REFUTED) == '"REFUTED"' and set(LADDER_STATES) == {HYPOTHESIS, CORROBORATED, REFUTED}


def test_each_state_has_one_line_wording_and_a_longer_description():
    for m in Ladder:
        assert m.headline == f"{m.value}: {m.wording}" and "\n" not in m.wording
        assert len(m.description) > len(m.wording) and m.description.endswith(".")
    assert len({m.wording for m in Ladder}) == 4
    assert ladder_headline("HYPOTHESIS") == Ladder.HYPOTHESIS.headline
    assert ladder_headline("SIDEWAYS") == "SIDEWAYS: unrecognised ladder state"
