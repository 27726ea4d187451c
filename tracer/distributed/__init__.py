"""Distributed capture: DTensor layouts and collectives on each rank (see docs/distributed.md)."""
from __future__ import annotations
