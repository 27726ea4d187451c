"""The per-call guard of a structure-only capture: no value reads, no real tensors.

It runs inside the capture session's function mode (so torch calls made here are not
recorded). Refusals carry the first source line outside torch and tracer: the user's code.
"""
from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ..capture.functions import FuncInfo
from ..capture.session import CallGuard, CaptureSession, StandIn
from ..errors import MetaKernelUnavailableError, RealTensorInStructureCaptureError, TracerError, ValueDependentBranchError
from . import meta_fallbacks
from .constants import ConstantLedger

# What transformers does with values on the way to attention, and how to avoid it on meta.
TRANSFORMERS_VALUE_REMEDY = (
    "transformers read a tensor's values here. On meta: pass input ids only (no attention_mask) and keep "
    "the default cache (use_cache=True, which skips the packed-sequence check that calls .item()); under "
    "attn_implementation='sdpa' (or flash) a passed attention_mask is read for its values, so build the "
    "model with attn_implementation='eager' to trace with a mask."
)


class StructureOnlyGuard(CallGuard):
    """Refuses value reads and real-device tensors during a meta capture."""

    def __init__(self, model: nn.Module, admission: dict[str, Any]) -> None:
        self.admission = admission
        self.transformers = type(model).__module__.startswith("transformers")
        config = getattr(model, "config", None)
        self.attn = getattr(config, "_attn_implementation", None) if config is not None else None
        self.constants = ConstantLedger()  # small tensors made from Python numbers in the forward
        self._constant_call = False
        admission["constants"] = self.constants.records

    def before_call(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict, session: CaptureSession) -> None:
        reals = _real_tensors(args, kwargs)
        self._constant_call = self.constants.makes_constant(info.qualname, args, kwargs, reals)
        real = next((t for t in reals if not self.constants.holds(t)), None)
        if real is not None:
            raise RealTensorInStructureCaptureError(
                f"{info.qualname} received a tensor on {real.device} (shape {tuple(real.shape)}) during a "
                f"structure-only capture: a real tensor reached the forward without being an input, "
                f"parameter or buffer (a plain module attribute or a global?)",
                site=session.site_text(), call=info.qualname, device=str(real.device), shape=tuple(real.shape),
                module=_module_of(session),
                remedy="Register the tensor as a buffer (module.register_buffer) so it is built on meta "
                       "with the model, or create it from an input's device inside forward.",
            )
        if info.value_read:
            site = session.site_text()
            remedy = TRANSFORMERS_VALUE_REMEDY if self.transformers else None
            raise ValueDependentBranchError(
                f"{info.qualname} reads a tensor's value (or a data-dependent shape) during a structure-only "
                f"capture; meta tensors have no values",
                site=site, remedy=remedy, call=info.qualname, module=_module_of(session),
                attn_implementation=self.attn,
            )

    def on_error(self, info: FuncInfo, exc: BaseException, session: CaptureSession,
                 call: tuple = ()) -> BaseException | StandIn | None:
        """A meta kernel that refused: its declared fallback output (disclosed), else a typed refusal."""
        if isinstance(exc, TracerError) or not isinstance(exc, (RuntimeError, NotImplementedError)):
            return None
        found = meta_fallbacks.fallback_output(info.qualname, *call[1:]) if call else None
        if found is not None:
            self.admission.setdefault("meta_fallbacks", []).append(meta_fallbacks.disclosure(
                info.qualname, found[0], found[1], len(session.records), session.site_text()))
            return StandIn(found[0])
        if meta_fallbacks.reads_values(exc):
            return ValueDependentBranchError(
                f"{info.qualname} reads a tensor's value inside its kernel (a size or index given as tensors?) "
                f"during a structure-only capture: {str(exc).splitlines()[0][:200]}",
                site=session.site_text(), call=info.qualname, module=_module_of(session))
        return MetaKernelUnavailableError(
            f"{info.qualname} cannot run on the meta device: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
            site=session.site_text(), call=info.qualname, module=_module_of(session))

    def after_call(self, info: FuncInfo, outputs: list, session: CaptureSession) -> None:
        for t in outputs:
            if t.device.type != "meta" and not (
                    self._constant_call and self.constants.admit(t, info.qualname, session.site_text())):
                raise RealTensorInStructureCaptureError(
                    f"{info.qualname} created a tensor on {t.device} (shape {tuple(t.shape)}) during a "
                    f"structure-only capture",
                    site=session.site_text(), call=info.qualname, device=str(t.device), shape=tuple(t.shape),
                    module=_module_of(session),
                )


def _real_tensors(args: tuple, kwargs: dict) -> list[Tensor]:
    """The argument tensors (top level, or inside a list/tuple) that are not on meta."""
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor):
            if a.device.type != "meta":
                found.append(a)
        elif type(a) in (list, tuple):
            found += [b for b in a if isinstance(b, Tensor) and b.device.type != "meta"]
    return found


def _module_of(session: CaptureSession) -> str:
    if not session.stack:
        return ""
    addr, call = session.stack[-1]
    return f"{addr}:{call}" if call else addr
