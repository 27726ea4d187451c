"""Replay: the kernel table, the op interpreter and validation built on them."""
from __future__ import annotations

from .interpreter import Deferred, ReplayError, Replayer, declare_dependence, forget_dependence
from .validate import ValidationReport, validate, validation_report

__all__ = ["Deferred", "ReplayError", "Replayer", "ValidationReport", "declare_dependence", "forget_dependence",
           "validate", "validation_report"]
