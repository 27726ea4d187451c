"""Claims about structure-only traces: the evidence envelope, the claim table and its join,
the twin descriptor, the plan audit, the discharge seal and the ladder of states."""
from __future__ import annotations

from .envelope import (CORROBORATED, ENVELOPE_SCHEMA, HYPOTHESIS, LADDER_STATES, LOCKED_FIELDS, OBSERVED, REFUTED,
                       DischargeResult, EvidenceEnvelope, activation_stats, check_plan, discharge, envelope_from_dict,
                       memory_peak, plan_checked, require_corroborated, require_values, seal_new_envelope, timings)
from .ladder import Ladder, contradiction_text, ladder_description, ladder_headline
from .seal import believed_state, state_when_saved

__all__ = [
    "CORROBORATED", "ENVELOPE_SCHEMA", "HYPOTHESIS", "LADDER_STATES", "LOCKED_FIELDS", "OBSERVED", "REFUTED",
    "DischargeResult", "EvidenceEnvelope", "Ladder", "activation_stats", "believed_state", "check_plan",
    "contradiction_text", "discharge", "envelope_from_dict", "memory_peak", "plan_checked", "ladder_description",
    "ladder_headline", "require_corroborated", "require_values", "seal_new_envelope", "state_when_saved", "timings",
]
