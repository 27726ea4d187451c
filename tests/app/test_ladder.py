"""Every surface says a claim state in the Ladder's one wording: banner, inspector, figure captions."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from app.ladder import caption, ladder_view
from app.views.inspector import _claim_text
from exporters.layout.style import ladder_caption
from tracer.claims import Ladder


def _four_states():
    """A real trace in each state: eager (OBSERVED), weights-free (HYPOTHESIS), and the weights-free trace
    discharged against its real twin (CORROBORATED) and as a bfloat16 twin against the float32 one (REFUTED)."""
    import tracer
    from tests.tracer.test_claims import IDS, SO, meta_twin, pair
    from tests.models import tiny_gpt2

    st, rt = pair(tiny_gpt2, IDS)
    wrong = tracer.trace(meta_twin(tiny_gpt2()).to(torch.bfloat16), (IDS.to("meta"),), capture=SO)
    refuted = wrong.discharge_against(rt)
    return {Ladder.OBSERVED: rt, Ladder.HYPOTHESIS: st,
            Ladder.CORROBORATED: st.with_envelope(st.discharge_against(rt).envelope),
            Ladder.REFUTED: wrong.with_envelope(refuted.envelope)}, wrong, refuted


def test_banner_inspector_and_captions_share_the_ladder_wording():
    traces, _, _ = _four_states()
    for m, trace in traces.items():
        assert trace.ladder_state == m.value
        assert ladder_view(trace).headline == m.headline
        assert _claim_text(m.value) == m.headline
        assert ladder_caption(m.value) == m.headline == caption(trace)


def test_a_discharge_report_carries_the_state_the_banner_shows():
    _, wrong, refuted = _four_states()
    view = ladder_view(wrong, refuted)  # the report's envelope, before the session attaches it
    assert view.state == "REFUTED" and view.headline == Ladder.REFUTED.headline
    assert f"ops[{refuted.contradiction['position']}]" in view.detail


def test_the_banner_believes_no_look_alike_envelope_or_report():
    """A state the banner is handed by an object discharge did not mint reads HYPOTHESIS."""
    traces, wrong, _ = _four_states()
    forged = SimpleNamespace(ladder_state="CORROBORATED", discharge={"state": "CORROBORATED"}, counts={})
    assert ladder_view(wrong, SimpleNamespace(envelope=forged, contradiction=None)).state == "HYPOTHESIS"
    other = traces[Ladder.CORROBORATED].envelope  # minted, but for another trace's claims
    assert ladder_view(wrong, SimpleNamespace(envelope=other, contradiction=None)).state == "HYPOTHESIS"


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
