"""Higher-order ops (`torch.cond`, `while_loop`, `map`, flex attention) as boundary ops, found after the forward.

A higher-order op reaches the function mode as one call (the HOP object is the function): its
branches or body run inside it with the mode popped, so nothing inside is recorded. The capture
keeps it as one op, like an autograd Function; this module names those ops as boundaries and
discloses them (`Provenance.foreign_kernels`, a warning), once per capture, with no per-call work:
the function table is searched for HOPs first, and records are read only when one was ever called.
"""
from __future__ import annotations

from typing import Any

from ..errors import HigherOrderOpError
from .boundaries import disclose
from .functions import INFO_CACHE
from .session import R_INFO

HOP_KIND = "higher_order_op"
# HOPs whose eager run under a function mode returns another structure than the plain forward's (torch's `map`
# relies on dynamo to rebuild its output tree; run eagerly it hands back the flat outputs): refused, typed.
_RESTRUCTURED = frozenset({"map_impl"})


def _hop_class() -> Any:
    try:
        from torch._ops import HigherOrderOperator
    except ImportError:  # a torch without higher-order ops
        return None
    return HigherOrderOperator


def mark(session: Any) -> None:
    """Append each recorded higher-order op to `session.boundaries` and disclose each kind once."""
    cls = _hop_class()
    if cls is None:
        return
    hops = {id(info) for info in list(INFO_CACHE.values()) if isinstance(info.func, cls)}
    if not hops:
        return
    seen = {idx for idx, _kind, _name in session.boundaries}
    for idx, rec in enumerate(session.records):
        info = rec[R_INFO]
        if id(info) in hops and idx not in seen:
            if info.kind in _RESTRUCTURED:
                raise _refusal(info, idx)
            session.boundaries.append((idx, HOP_KIND, info.qualname))
            disclose(session, HOP_KIND, info.qualname, stacklevel=5)


def refuse_failed_forward(session: Any, exc: BaseException) -> None:
    """A forward that raised after a restructuring HOP ran (the model got its flat outputs): the typed refusal,
    raised from `exc`; otherwise nothing (the caller re-raises `exc`)."""
    cls = _hop_class()
    if cls is None or isinstance(exc, HigherOrderOpError):
        return
    for idx, rec in enumerate(session.records):
        info = rec[R_INFO]
        if info.kind in _RESTRUCTURED and isinstance(info.func, cls):
            raise _refusal(info, idx) from exc


def _refusal(info: Any, idx: int) -> HigherOrderOpError:
    return HigherOrderOpError(f"{info.qualname} (op #{idx}) ran under the capture, which cannot give the forward the "
                              "output structure the plain forward gets", site=info.qualname, op_index=idx)
