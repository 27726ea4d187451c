"""Every surface says a claim state in the Ladder's one wording: banner, inspector, figure captions."""
from __future__ import annotations

from types import SimpleNamespace

from app.ladder import caption, ladder_view
from app.views.inspector import _claim_text
from exporters.layout.style import ladder_caption
from tracer.claims import Ladder


def test_banner_inspector_and_captions_share_the_ladder_wording():
    for m in Ladder:
        envelope = SimpleNamespace(ladder_state=m.value, discharge=None, counts={})
        trace = SimpleNamespace(ladder_state=m.value, envelope=None if m is Ladder.OBSERVED else envelope,
                                ops=(), values={}, param_count=lambda: 0)
        assert ladder_view(trace).headline == m.headline
        assert _claim_text(m.value) == m.headline
        assert ladder_caption(m.value) == m.headline == caption(trace)


def test_a_discharge_report_carries_the_state_the_banner_shows():
    hypothesis = SimpleNamespace(ladder_state="HYPOTHESIS", discharge=None, counts={})
    refuted = SimpleNamespace(ladder_state="REFUTED", discharge={"contradiction": {"table": "ops", "position": 2}})
    trace = SimpleNamespace(ladder_state="HYPOTHESIS", envelope=hypothesis, ops=(), values={}, param_count=lambda: 0)
    report = SimpleNamespace(envelope=refuted, contradiction=None)
    view = ladder_view(trace, report)
    assert view.state == "REFUTED" and view.headline == Ladder.REFUTED.headline and "ops[2]" in view.detail


def test_the_banner_says_what_a_corroborating_discharge_did_not_compare_position_by_position():
    from tests.tracer.test_op_order import _pair

    st, rt = _pair(("b", "a"))  # two independent branches, run in the other order on the real side
    result = st.discharge_against(rt)
    detail = ladder_view(st.with_envelope(result.envelope)).detail
    assert result.state == "CORROBORATED" and "every claim holds" in detail
    assert "Not compared position by position: 4 ops ran at other positions" in detail
    st, rt = _pair(("a", "b"))
    plain = ladder_view(st.with_envelope(st.discharge_against(rt).envelope)).detail
    assert "every claim holds" in plain and "position by position" not in plain
