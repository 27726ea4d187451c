"""One column's outcome: pass, a typed refusal (code + one line), or an untyped exception (a defect)."""
from __future__ import annotations

from typing import Any, Callable

PASS = "pass"
UNTYPED = "untyped"
SKIPPED = "skipped"
FAILED = "failed"  # a check that returned False (not an exception), e.g. outputs not bit-equal


def one_line(text: str, limit: int = 160) -> str:
    """The first line of `text`, cut to `limit` characters."""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def passed() -> dict[str, Any]:
    return {"result": PASS}


def failed(code: str, reason: str) -> dict[str, Any]:
    """A check that ran and did not hold (no exception); `code` names the check."""
    return {"result": FAILED, "code": code, "reason": one_line(reason)}


def skipped(reason: str) -> dict[str, Any]:
    return {"result": SKIPPED, "reason": one_line(reason)}


def from_exception(exc: BaseException) -> dict[str, Any]:
    """A typed tracer refusal keeps its code; anything else is UNTYPED, named by its class."""
    from tracer.errors import TracerError

    if isinstance(exc, TracerError):
        return {"result": "typed", "code": exc.code, "reason": one_line(str(exc))}
    return {"result": UNTYPED, "code": type(exc).__name__, "reason": one_line(str(exc))}


def run_column(fn: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
    """Run one column; its own dict, `passed()` when it returns None, or the exception's outcome."""
    try:
        out = fn()
    except Exception as exc:  # every exception is recorded: typed or UNTYPED
        return from_exception(exc)
    return passed() if out is None else out
