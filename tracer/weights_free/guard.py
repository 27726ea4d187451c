"""The per-call guard of a structure-only capture: no value reads it cannot answer, no real tensors.

It runs inside the capture session's function mode (so torch calls made here are not recorded).
A value read on a tensor whose value is fixed by the forward's own code (a mask made with
`torch.ones` from a shape, position ids from `torch.arange`) is answered from its known value
(`ConstantLedger`) and disclosed in the admission record; a read of anything that depends on
weights or inputs refuses. Refusals carry the first source line outside torch and tracer: the user's code.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

from torch import Tensor, nn

from ..capture.functions import FuncInfo
from ..capture.kernel.contract import GuardFastPath
from ..capture.session import CallGuard, CaptureSession, StandIn
from ..errors import MetaKernelUnavailableError, RealTensorInStructureCaptureError, TracerError, ValueDependentBranchError
from . import known_values as kv
from . import meta_fallbacks
from .autocast_model import AutocastModel
from .constants import FROM_PYTHON_DATA, PLAIN_TENSORS, ConstantLedger, meta_like
from .neutral_reads import neutral_read
from .simulated_device import SimulatedDevice

# What transformers does with values on the way to attention, and how to avoid it on meta.
TRANSFORMERS_VALUE_REMEDY = (
    "transformers read a tensor's values here. If they are an input's (a mask, a grid), pass that input as a "
    "real tensor: its values are then known and the read is answered. Otherwise, on meta: pass input ids only "
    "(no attention_mask) and keep the default cache (use_cache=True, which skips the packed-sequence check that "
    "calls .item()); under attn_implementation='sdpa' (or flash) a meta attention_mask is read for its values, "
    "so build the model with attn_implementation='eager' to trace with one, or call "
    "tracer.bridges.transformers.register_attention(model) (value-free masks over eager or sdpa)."
)
_REFUSED_READS = frozenset({"numpy", "array"})  # a tensor leaving torch: not answered even when known
_VALUE_OPS = frozenset({"any", "all"})  # value reads that return a tensor: answered as ordinary known ops
_MAYBE_RANDOM = kv.RANDOM | kv.DROPOUTS  # the kinds `known_values.is_random` can answer True for
# kinds checked in full even on meta tensors with nothing known: random draws, calls that read only their
# first tensor's shape (its value may be known without it)
_SCRUTINIZED = _MAYBE_RANDOM | kv.SHAPE_ONLY_FIRST
_VALUE_UNKNOWN = object()  # `_checked`: the output's value is not known, the call runs as made (on meta)
_NOT_ASKED = object()  # `_values_kind`: `values_for` was not asked


class StructureOnlyGuard(CallGuard):
    """Refuses value reads it cannot answer from constants, and real-device tensors, during a meta capture."""

    def __init__(self, model: nn.Module, admission: dict[str, Any], *, simulate_device: str | None = None) -> None:
        self.admission = admission
        self.simulated = SimulatedDevice(simulate_device) if simulate_device else None
        # the call as run: device arguments naming the simulated device go to meta (None: `func` as is)
        self._on_meta = self.simulated.on_meta if self.simulated is not None else _as_called
        self.transformers = type(model).__module__.startswith("transformers")
        config = getattr(model, "config", None)
        self.attn = getattr(config, "_attn_implementation", None) if config is not None else None
        self.constants = ConstantLedger()  # real constants and known values made in the forward
        self._constant_call = False
        self._stand_ins: dict[int, tuple[Tensor, Tensor]] = {}  # id -> (real tensor, its meta stand-in)
        self._values = "constant"
        self._mixed: Tensor | None = None
        admission["constants"] = self.constants.records
        admission["resolved_reads"] = self.constants.reads  # every value read answered without weights
        # autocast entered around the capture, for the device the meta model stands for: its dtype rules modeled
        self.autocast = AutocastModel.ambient(self.simulated.type if self.simulated is not None else "cpu", admission)

    def _real_tensor_remedy(self, real: Tensor) -> str:
        remedy = ("Register the tensor as a buffer (module.register_buffer) so it is built on meta with the model, "
                  "or create it from an input's device inside forward.")
        if self.simulated is not None:
            remedy += (f" (A tensor on the simulated device {self.simulated.type!r} would enter as a meta stand-in; "
                       f"this one is on {real.device.type!r}.)")
        return remedy

    def _with_stand_ins(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict, session: CaptureSession) -> Callable:
        """The call with each real tensor from outside the forward that sits on the simulated device (a cache
        filled by a real run, a plain attribute) replaced by a meta stand-in of its shape, disclosed; its
        values are never read (a value read of it refuses)."""
        ledger, stand_ins = self.constants, self._stand_ins
        record = self.admission.setdefault("external_tensors", [])

        def swap(a: Any) -> Any:
            if not isinstance(a, Tensor) or a.device.type == "meta" or ledger.holds(a):
                return a
            hit = stand_ins.get(id(a))
            if hit is None or hit[0] is not a:
                hit = stand_ins[id(a)] = (a, meta_like(a))
                record.append({"call": info.qualname, "site": session.site_text(), "module": _module_of(session),
                               "shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", ""),
                               "device": str(a.device)})
            return hit[1]

        swapped_args = tuple(swap(a) if type(a) not in (list, tuple) else type(a)(swap(b) for b in a) for a in args)
        swapped_kwargs = {k: swap(v) if type(v) not in (list, tuple) else type(v)(swap(b) for b in v)
                          for k, v in kwargs.items()}
        inner = self.before_call(info, func, swapped_args, swapped_kwargs, session) or func
        return lambda *_a, **_k: inner(*swapped_args, **swapped_kwargs)

    def device_reads(self, model: nn.Module, session: CaptureSession | None = None) -> Any:
        """A context for the forward: the model sees the simulated device (a no-op without one). With
        `session`, that session's own function mode answers the reads (`CaptureSession.simulated`)."""
        if self.simulated is None:
            return contextlib.nullcontext()
        if session is not None:
            session.simulated = self.simulated
        return self.simulated.reads(model, mode=session is None)

    def common_case(self) -> GuardFastPath | None:
        """The C hook's copy of `before_call`'s common case and `after_call`'s check (`_hotpath.guard_passes`,
        `guard_after`): the ledger's scan, the kinds checked in full, FROM_PYTHON_DATA, and the
        guard itself, whose `_constant_call` and `_mixed` it resets as the common case does; then the simulated
        device's calls that may name it (`SimulatedDevice.common_case`)."""
        if self.autocast is not None:  # every call's output dtypes are modeled in `before_call`
            return None
        simulated = self.simulated.common_case() if self.simulated is not None else None
        return GuardFastPath(*self.constants.scan_spec(), _SCRUTINIZED, FROM_PYTHON_DATA, simulated, self)

    def before_call(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict,
                    session: CaptureSession) -> Callable | None:
        substitute = self._before_call(info, func, args, kwargs, session)
        if self.autocast is None:
            return substitute
        return self.autocast.wrap(substitute or func, func, info.qualname)

    def _before_call(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict,
                     session: CaptureSession) -> Callable | None:
        reals, n_tensors, first_known, python_only = self.constants.scan(args, kwargs)  # one pass over the arguments
        kind = info.kind
        if reals or python_only or first_known or info.value_read or kind in _SCRUTINIZED \
                or info.qualname in FROM_PYTHON_DATA:
            checked = self._checked(info, func, args, kwargs, session, reals, n_tensors, first_known, python_only)
            if checked is not _VALUE_UNKNOWN:
                return checked
        else:  # the common call: meta tensors, none with a known value; no read, nothing random, no constant made
            self._constant_call = False
            self._mixed = None
        if info.inplace or "out" in kwargs or "inplace" in kwargs:  # else `_written` is None: nothing to forget
            self._forget_written(info, args, kwargs)
        return self._on_meta(kind, func, args, kwargs)  # None unless the call names the simulated device

    def _checked(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict, session: CaptureSession,
                 reals: list[Tensor], n_tensors: int, first_known: bool, factory: bool) -> Any:
        """The call's checks beyond the common case: real tensors (refused, or meta stand-ins), constants made,
        value reads (answered or refused) and known values carried; `_VALUE_UNKNOWN` when none applies and the
        call runs as made (on meta)."""
        ledger = self.constants
        kind = info.kind
        # `factory`: no tensor at all (torch.arange(n), torch.div(7, 2), torch.randn(3)); without a real tensor
        # or one of those, only a call of FROM_PYTHON_DATA can make a constant
        self._constant_call = bool(reals or factory or info.qualname in FROM_PYTHON_DATA) and \
            ledger.makes_constant(info.qualname, args, kwargs, reals, factory=factory)
        if reals:
            real = next((t for t in reals if not ledger.holds(t)), None)
            if real is not None and self.simulated is not None and real.device.type == self.simulated.type:
                return self._with_stand_ins(info, func, args, kwargs, session)
            if real is not None:
                raise RealTensorInStructureCaptureError(
                    f"{info.qualname} received a tensor on {real.device} (shape {tuple(real.shape)}) during a "
                    f"structure-only capture: a real tensor reached the forward without being an input, "
                    f"parameter or buffer (a plain module attribute or a global?)",
                    site=session.site_text(), call=info.qualname, device=str(real.device), shape=tuple(real.shape),
                    module=_module_of(session),
                    remedy=self._real_tensor_remedy(real),
                )
        asked = _NOT_ASKED  # `values_for` of this call, when already asked (the ledger is unchanged until it is used)
        if self._constant_call:
            self._values, asked = _values_kind(kind, args, kwargs, ledger)
        self._mixed = next((t for t in reals if t.dim() > 0), None) if reals and len(reals) < n_tensors \
            else None  # a constant made on a real device meets meta tensors
        if info.value_read and kind not in _VALUE_OPS and kv.reads_values(kind, args, kwargs):
            return self._answer_read(info, func, args, kwargs, session)
        if kind in _MAYBE_RANDOM and kv.is_random(kind, args, kwargs):
            return _VALUE_UNKNOWN
        known = None
        # a real constant moved onto meta (`torch.ones(n).to(x.device)` under a simulated device) keeps its value
        if first_known or self._constant_call or kind in kv.SHAPE_ONLY_FIRST or (factory and kind in kv.VALUE_FACTORIES):
            known = kv.values_for(kind, args, kwargs, ledger) if asked is _NOT_ASKED else asked
        if known is None:  # the output's value depends on weights or inputs (or nothing known is involved)
            if info.value_read and kind in _VALUE_OPS:
                self._refuse_read(info, session)
            return _VALUE_UNKNOWN
        return self._propagating(info, func, args, kwargs, known, self._on_meta(kind, func, args, kwargs) or func)

    # -- known values ---------------------------------------------------------------------------
    def _propagating(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict, known: tuple,
                     on_meta: Callable) -> Callable:
        """`on_meta` (the call on meta), and `func` on known values beside it when the output fits the bound."""
        ledger = self.constants
        given = ledger.given_basis(args, kwargs)

        def run(*a: Any, **k: Any) -> Any:
            out = on_meta(*a, **k)
            metas = [m for m in ((out,) if isinstance(out, Tensor) else out if isinstance(out, (tuple, list)) else ())
                     if isinstance(m, Tensor)]
            written = _written(info, args, kwargs)
            if not metas and written is None:
                return out
            if any(m.device.type != "meta" for m in metas):
                return out  # a real constant: admitted in after_call
            if sum(m.numel() for m in metas) > ledger.budget - ledger.used:
                ledger.dropped += 1
                if written is not None:
                    ledger.forget_aliases(written)
                return out
            try:
                value = func(*known[0], **known[1])
            except Exception:  # the known value is a side computation: when it fails, the value is unknown
                if written is not None:
                    ledger.forget_aliases(written)
                return out
            kept = {id(m) for m, v in kv.pair_outputs(out, value) if ledger.remember(m, v, given)}
            if written is not None and id(written) not in kept and out is not None:
                ledger.forget_aliases(written)
            return out

        return run

    def _answer_read(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict, session: CaptureSession) -> Callable:
        """A substitute that answers the read from known values (disclosed), or a typed refusal."""
        ledger = self.constants
        kind = info.kind
        known = None if kind in _REFUSED_READS else kv.values_for(kind, args, kwargs, ledger)
        site = session.site_text()
        basis = ledger.given_basis(args, kwargs) or "constants"  # what the answer comes from
        if known is None and kind == "repeat_interleave":
            size = kv.repeat_size(args, kwargs, ledger)  # the repeats are known: they fix the output size
            if size is not None:
                return self._disclosed(info, site, session, lambda: func(*args, **{**kwargs, "output_size": size}),
                                       basis)
        if known is None:
            neutral = neutral_read(kind, site)
            if neutral is None:
                self._refuse_read(info, session)
            return self._disclosed(info, site, session, lambda: neutral.answer, f"neutral: {neutral.reason}")
        if kind in kv.SHAPE_READS:
            def shaped() -> Any:
                value = func(*known[0], **known[1])
                out = kv.to_meta(value)
                for m, v in kv.pair_outputs(out, value):
                    ledger.remember(m, v, None if basis == "constants" else basis)
                return out
            return self._disclosed(info, site, session, shaped, basis)
        return self._disclosed(info, site, session, lambda: func(*known[0], **known[1]), basis)

    def _disclosed(self, info: FuncInfo, site: str | None, session: CaptureSession, answer: Callable[[], Any],
                   basis: str) -> Callable:
        ledger = self.constants
        module = _module_of(session)

        def run(*_a: Any, **_k: Any) -> Any:
            value = answer()
            ledger.record_read(info.qualname, site, module, kv.summarize(value), basis)
            self.admission["resolved_read_count"] = ledger.read_count
            return value

        return run

    def _forget_written(self, info: FuncInfo, args: tuple, kwargs: dict) -> None:
        written = _written(info, args, kwargs)
        if written is not None:
            self.constants.forget_aliases(written)

    def _refuse_read(self, info: FuncInfo, session: CaptureSession) -> None:
        remedy = TRANSFORMERS_VALUE_REMEDY if self.transformers else None
        raise ValueDependentBranchError(
            f"{info.qualname} reads a tensor's value (or a data-dependent shape) during a structure-only "
            f"capture; meta tensors have no values, and this one is not fixed by constants of the forward "
            f"(it depends on weights or inputs)" + (
                f"; {self.constants.dropped} known value(s) were dropped at the bound of "
                f"{self.constants.budget} elements" if self.constants.dropped else ""),
            site=session.site_text(), remedy=remedy, call=info.qualname, module=_module_of(session),
            attn_implementation=self.attn,
        )

    # -- errors and outputs ------------------------------------------------------------------------
    def on_error(self, info: FuncInfo, exc: BaseException, session: CaptureSession,
                 call: tuple = ()) -> BaseException | StandIn | None:
        """A meta kernel that refused: a CPU constant mixed in (typed), its declared fallback output
        (disclosed), or a typed refusal."""
        if isinstance(exc, TracerError) or not isinstance(exc, (RuntimeError, NotImplementedError)):
            return None
        if self._mixed is not None:
            return _mixed_devices(info, self._mixed, self.constants.made_by(self._mixed), session)
        found = meta_fallbacks.fallback_output(info.qualname, *call[1:]) if call else None
        if found is not None:
            self.admission.setdefault("meta_fallbacks", []).append(meta_fallbacks.disclosure(
                info.qualname, found[0], found[1], len(session.records), session.site_text()))
            return StandIn(found[0])
        if meta_fallbacks.reads_values(exc):
            answered = self._kernel_read_answered(info, call, session) if call else None
            if answered is not None:
                return answered
            return ValueDependentBranchError(
                f"{info.qualname} reads a tensor's value inside its kernel (a size or index given as tensors, or a "
                f"boolean mask index, whose count of True values sets the output's size?) "
                f"during a structure-only capture: {str(exc).splitlines()[0][:200]}",
                site=session.site_text(), call=info.qualname, module=_module_of(session))
        return MetaKernelUnavailableError(
            f"{info.qualname} cannot run on the meta device: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
            site=session.site_text(), call=info.qualname, module=_module_of(session))

    def _kernel_read_answered(self, info: FuncInfo, call: tuple, session: CaptureSession) -> StandIn | None:
        """A meta kernel that needed values (`torch.arange(n)` of a 0-dim tensor, `x[mask]`, `F.pad(x, sizes)`)
        run on the CPU instead when the values it reads are known: every tensor argument's, or, for a call of
        `known_values.DATA_FIRST`, every one but the first, which only lends its shape (the output's value is
        then unknown). The output enters as meta, the read is disclosed; None when the values are not known."""
        func, args, kwargs = call
        func = info.func or func  # the torch callable itself, not a substitute that runs it on meta
        ledger = self.constants
        known = kv.values_for(info.kind, args, kwargs, ledger)
        exact = known is not None
        if not exact and info.kind in kv.DATA_FIRST and args and isinstance(args[0], Tensor):
            known = kv.values_for(info.kind, args, kwargs, ledger, data_first=True)
        if known is None:
            return None
        try:
            value = func(*known[0], **known[1])
        except Exception:  # noqa: BLE001 - the side computation failed: the read stays unanswered (refused)
            return None
        out = kv.to_meta(value)
        basis = ledger.given_basis(args, kwargs) or "constants"
        if exact:
            for m, v in kv.pair_outputs(out, value):
                ledger.remember(m, v, None if basis == "constants" else basis)
        ledger.record_read(info.qualname, session.site_text(), _module_of(session),
                           kv.summarize(value) if exact else {"shape_from": "known arguments"}, basis)
        self.admission["resolved_read_count"] = ledger.read_count
        return StandIn(out)

    def after_call(self, info: FuncInfo, outputs: list, session: CaptureSession) -> None:
        for t in outputs:
            if type(t) in PLAIN_TENSORS and t.is_meta:  # as `device.type == "meta"`, cheaper
                continue
            if t.device.type != "meta" and not (
                    self._constant_call and self.constants.admit(t, info.qualname, session.site_text(), self._values)):
                raise RealTensorInStructureCaptureError(
                    f"{info.qualname} created a tensor on {t.device} (shape {tuple(t.shape)}) during a "
                    f"structure-only capture" + (
                        f", past the bound of {self.constants.budget} elements for tensors made in the forward"
                        if self._constant_call else ""),
                    site=session.site_text(), call=info.qualname, device=str(t.device), shape=tuple(t.shape),
                    module=_module_of(session),
                )


def _mixed_devices(info: FuncInfo, real: Tensor, origin: dict | None, session: CaptureSession
                   ) -> RealTensorInStructureCaptureError:
    made = f" by {origin['call']} at {origin['site']}" if origin else ""
    return RealTensorInStructureCaptureError(
        f"{info.qualname} mixed a tensor made on {real.device} inside the forward{made} (shape "
        f"{tuple(real.shape)}) with meta tensors and failed: the constant is not on the model's device",
        site=session.site_text(), call=info.qualname, device=str(real.device), shape=tuple(real.shape),
        made_by=origin["call"] if origin else None, module=_module_of(session))


def _as_called(_kind: str, _func: Any, _args: tuple, _kwargs: dict) -> None:
    """Without a simulated device every call runs as the model made it."""
    return None


def _values_kind(kind: str, args: tuple, kwargs: dict, ledger: ConstantLedger) -> tuple[str, Any]:
    """What the values of a real tensor made by this call are (constant, random, uninitialized or unknown),
    and `values_for`'s answer when it was asked (else `_NOT_ASKED`)."""
    if kv.is_random(kind, args, kwargs):
        return "random", _NOT_ASKED
    if kind in kv.UNINITIALIZED:
        return "uninitialized", _NOT_ASKED
    known = kv.values_for(kind, args, kwargs, ledger)
    return ("constant" if known is not None else "unknown"), known


def _written(info: FuncInfo, args: tuple, kwargs: dict) -> Tensor | None:
    """The tensor an in-place call writes (its first argument or `out=`), or None."""
    out = kwargs.get("out") if kwargs else None
    if isinstance(out, Tensor):
        return out
    if info.inplace or (kwargs and kwargs.get("inplace") is True):
        if args and isinstance(args[0], Tensor):
            return args[0]
        target = kwargs.get("tensor") if kwargs else None  # nn.init.uniform_(tensor=w), as torch passes it
        return target if isinstance(target, Tensor) else None
    return None


def _module_of(session: CaptureSession) -> str:
    if not session.stack:
        return ""
    addr, call = session.stack[-1]
    return f"{addr}:{call}" if call else addr
