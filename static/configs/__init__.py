"""Shipped model configs, installed as the package `tracer.configs` (see pyproject's package-dir)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_configs() -> dict[str, Path]:
    """The shipped config files by name (file stem), sorted by name."""
    folder = resources.files(__name__)
    return {Path(str(p)).stem: Path(str(p)) for p in sorted(folder.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".json")}
