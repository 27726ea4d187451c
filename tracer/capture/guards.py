"""Several per-call guards as one (a structure-only capture that also records its backward)."""
from __future__ import annotations

from typing import Any

from .functions import FuncInfo
from .session import CallGuard, CaptureSession, StandIn


class GuardChain(CallGuard):
    """Runs each guard in order; the first answer from `on_error` (a refusal or a stand-in) wins."""

    def __init__(self, *guards: CallGuard) -> None:
        self.guards = tuple(guards)

    def before_call(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict, session: CaptureSession) -> Any:
        """Each guard checks the call in turn; the first substitute one returns runs instead of `func`."""
        substitute = None
        for g in self.guards:
            found = g.before_call(info, func if substitute is None else substitute, args, kwargs, session)
            if substitute is None and found is not None:
                substitute = found
        return substitute

    def after_call(self, info: FuncInfo, outputs: list, session: CaptureSession) -> None:
        for g in self.guards:
            g.after_call(info, outputs, session)

    def on_error(self, info: FuncInfo, exc: BaseException, session: CaptureSession,
                 call: tuple = ()) -> BaseException | StandIn | None:
        for g in self.guards:
            typed = g.on_error(info, exc, session, call)
            if typed is not None:
                return typed
        return None


def chain(*guards: CallGuard | None) -> CallGuard | None:
    """The guards given (None skipped) as one guard, or None when there are none."""
    present = [g for g in guards if g is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else GuardChain(*present)
