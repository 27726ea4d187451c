"""Claims about structure-only traces: the evidence envelope, the claim table and its join,
the twin descriptor, the plan audit and the ladder of states."""
from __future__ import annotations

from .envelope import (CORROBORATED, ENVELOPE_SCHEMA, HYPOTHESIS, LADDER_STATES, OBSERVED, REFUTED, DischargeResult,
                       EvidenceEnvelope, activation_stats, check_plan, discharge, envelope_from_dict, memory_peak, plan_checked,
                       require_corroborated, require_values, seal_new_envelope, timings)
from .ladder import Ladder, ladder_description, ladder_headline

__all__ = [
    "CORROBORATED", "ENVELOPE_SCHEMA", "HYPOTHESIS", "LADDER_STATES", "OBSERVED", "REFUTED", "DischargeResult",
    "EvidenceEnvelope", "Ladder", "activation_stats", "check_plan", "discharge", "envelope_from_dict", "memory_peak", "plan_checked",
    "ladder_description", "ladder_headline", "require_corroborated", "require_values", "seal_new_envelope", "timings",
]
