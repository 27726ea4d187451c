"""Compatibility: the doctor and its ledger of deployment-path rows."""
from __future__ import annotations

from .doctor import Detector, DoctorReport, Row, doctor

__all__ = ["Detector", "DoctorReport", "Row", "doctor"]
