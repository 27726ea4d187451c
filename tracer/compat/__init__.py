"""Compatibility: the doctor and its ledger of deployment-path rows."""
from __future__ import annotations

from .doctor import DoctorReport, Row, doctor

__all__ = ["DoctorReport", "Row", "doctor"]
