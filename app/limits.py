"""Declared limits on what the app will read or build, checked before any work starts.

Each limit has a name, a default and a sentence; `torchlens-explore --limit NAME=VALUE` raises one.
A value past a limit is refused with `LimitExceededError` (code `limit_exceeded`) naming the flag.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from tracer.errors import InvalidInputError

from .errors import LimitExceededError


@dataclass(frozen=True)
class Limits:
    """What one request may cost; the defaults hold every shipped config with room to spare."""

    config_bytes: int = 4 * 2**20  # a config JSON is a few KB; 4 MiB is far past any real one
    layers: int = 1024  # decoder/encoder layers a config may declare (Llama-3.1-405B has 126)
    hidden_size: int = 65536  # hidden / embedding width (the largest shipped is 16,384)
    input_elements: int = 1 << 20  # product of the input shape (batch x sequence)
    input_rank: int = 8  # dimensions of an input tensor; token ids for a config are exactly 2
    zip_bytes: int = 16 * 2**30  # total uncompressed size a .trace.zip may extract to
    zip_members: int = 64  # files in a .trace.zip (a saved trace holds two)
    factory_seconds: float = 300.0  # how long `--model mod:fn` may take to build the model

    def check(self, name: str, value: float, what: str, site: str) -> None:
        """Refuse `value` when it is over limit `name`."""
        limit = getattr(self, name)
        if value > limit:
            raise LimitExceededError(
                f"{what} is {value:,}, over the limit of {limit:,}", site=site, limit=name, value=value,
                remedy=f"If this is intended, raise the limit: torchlens-explore --limit {name}={value}")

    def with_overrides(self, pairs: Iterable[str]) -> "Limits":
        """A copy with `NAME=VALUE` overrides applied (refuses unknown names and bad numbers)."""
        changes: dict[str, float] = {}
        fields = {f.name: f.type for f in dataclasses.fields(self)}
        for pair in pairs:
            name, _, text = pair.partition("=")
            name = name.strip().replace("-", "_")
            if name not in fields:
                raise InvalidInputError(f"no limit named {name!r}", site=f"--limit {pair}",
                                        remedy=f"Limits: {', '.join(fields)}.")
            try:
                value = float(text) if fields[name] == "float" else int(text)
            except ValueError:
                raise InvalidInputError(f"limit {name} needs a number, got {text!r}", site=f"--limit {pair}",
                                        remedy=f"Write --limit {name}=NUMBER.") from None
            if value <= 0:
                raise InvalidInputError(f"limit {name} must be positive", site=f"--limit {pair}",
                                        remedy=f"Write --limit {name}=NUMBER with a positive number.")
            changes[name] = value
        return dataclasses.replace(self, **changes)


_current = Limits()


def current() -> Limits:
    """The limits in force (set once at start-up by the CLI; immutable)."""
    return _current


def set_limits(limits: Limits) -> None:
    """Install the limits the CLI parsed (before serving; sessions only read them)."""
    global _current
    _current = limits
