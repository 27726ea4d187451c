"""Failure classes: which known defect (or disclosed limitation) an outcome belongs to.

The class names are what docs/zoo.md counts and what the sample tests' xfail reasons name.
"""
from __future__ import annotations

from typing import Any

CLASSES = {
    "edge_false_alarm": "validation: perturbing a parent left the output unchanged (piecewise-constant or "
                        "reduced output; issue 11 item 2, validator)",
    "replay_not_bit_exact": "validation: a replayed kernel differs from the recorded value (non-bit-exact or "
                            "random kernel; issue 11 item 2, validator)",
    "inplace_not_saved": "validation: an in-place write was not saved, so it cannot be replayed (issue 11 item 2)",
    "validate_untyped": "validation raised an untyped exception (issue 11 item 2)",
    "fast_path_changed": "capture: the traced output is not bit-equal to the plain forward (a fast path "
                         "disabled under the function mode; issue 11 item 3)",
    "offline_validation": "a trace loaded from a file cannot be validated (live_calls_missing; issue 11 item 2, "
                          "offline validation)",
    "no_live_calls": "validation refuses a trace whose forward made no torch call (live_calls_missing)",
    "weights_free_refused": "weights-free capture refused typed",
    "discharge_refuted": "the weights-free claims were refuted by the real capture",
    "untyped": "an untyped exception escaped a tracer call",
    "forward_unavailable": "the plain forward does not run on the generated inputs (sweep limitation, not a "
                           "tracer result)",
    "worker_error": "the sweep worker crashed or timed out",
}


def classify(column: str, outcome: dict[str, Any]) -> str | None:
    """The failure class of one column's outcome; None when it passed or was skipped."""
    result, code, reason = outcome.get("result"), outcome.get("code"), outcome.get("reason", "")
    if result in ("pass", "skipped"):
        return None
    if column == "forward" or result == "unavailable":
        return "forward_unavailable"
    if result == "untyped":
        return "validate_untyped" if column.endswith("validate") else "untyped"
    if code == "output_not_bit_equal":
        return "fast_path_changed"
    if code == "live_calls_missing":
        return "offline_validation" if column == "reload_validate" else "no_live_calls"
    if code == "validation_failed":
        if reason.startswith("[edge]"):
            return "edge_false_alarm"
        if reason.startswith("[replay]"):
            return "replay_not_bit_exact"
        if reason.startswith("[missing]"):
            return "inplace_not_saved"
        return "validation_failed"
    if column == "weights_free":
        return "weights_free_refused"
    if column == "discharge":
        return "discharge_refuted"
    return code or "failed"
