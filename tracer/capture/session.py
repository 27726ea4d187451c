"""The capture session: a scoped TorchFunctionMode plus module scopes, turned into a Trace.

Nothing is patched globally. The session wraps each module's forward (or hooks a module that
has hooks of its own) and enters a function mode; all are removed in a `finally`, so the model
and torch are as they were afterwards, also when the forward raises. The hot path (`__torch_function__`)
appends raw tuples; labels, metadata strings and Op records are made once, after the forward.
"""
from __future__ import annotations

import bisect
import contextlib
import sys
import threading
import weakref
from types import MethodType
from typing import Any, Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from . import boundaries as _boundaries  # foreign-kernel boundary ops
from .kernel import native as _native  # the C kernel (None entry points: the Python kernel)
from .kernel.contract import CaptureState, GuardFastPath, record as _record
from ..ir import EMPTY_STACK, ModuleStack
from .call_template import TENSOR, scrub_deep, scrub_kwargs
from .functions import INFO_CACHE as _INFO_CACHE, FuncInfo, func_info
from .scopes import ModuleScopes
from .walk import first_visits, iter_tensors, named_modules, named_state, shallow_tensors

_Tensor = torch.Tensor
_in_functorch_transform = torch._C._functorch.peek_interpreter_stack  # None outside torch.vmap / torch.func
_Parameter = nn.Parameter
_POS = tuple(str(i) for i in range(64))
_SEQ = (list, tuple)

# The raw op record (a plain list, filled on the hot path): its fields are defined once, in kernel/contract.py.
from .kernel.contract import (R_ARGS, R_CALL, R_CALLSPEC, R_INFO, R_INPLACE, R_IO, R_KWARGS,  # noqa: E402,F401
                              R_META, R_N_OUT, R_OUT_IDX, R_PARAMS, R_PARENTS, R_SITE, R_STACK, R_TENSOR, R_WRITES)

_native.configure_kernel(_Tensor, TENSOR, _POS)
_SCAN_ARGS, _RECORD_OUTPUTS, _SITE = _native.scan_args, _native.record_outputs, _native.site
if _native.configure_call is not None:
    _native.configure_call(_INFO_CACHE, _in_functorch_transform, scrub_deep, shallow_tensors)
_TORCH_FUNCTION = _native.torch_function  # a call start to end in C, bound to the session for its forward
# The fields a call template is made from (see call_template.call_templates).
from .kernel.contract import TEMPLATE_FIELDS  # noqa: E402,F401

_INTERNAL_PREFIXES: tuple[str, ...] = ()


def _internal_prefixes() -> tuple[str, ...]:
    global _INTERNAL_PREFIXES
    if not _INTERNAL_PREFIXES:
        import os

        import tracer

        torch_dir = os.path.dirname(torch.__file__) + os.sep
        tracer_dir = os.path.dirname(tracer.__file__) + os.sep
        _INTERNAL_PREFIXES = (torch_dir, tracer_dir, "<frozen ")
    return _INTERNAL_PREFIXES


_ACTIVE = threading.local()  # .session: the capture whose forward runs in this thread (None outside one)


def active_session() -> "CaptureSession | None":
    """The capture whose forward is running in this thread, or None."""
    return getattr(_ACTIVE, "session", None)


@contextlib.contextmanager
def outer_suspended() -> Any:
    """Inside a running capture (a `tracer.trace` called from a captured forward): the outer capture records
    nothing of this block except the inner forward itself (`CaptureSession.run` resumes it around that)."""
    outer = active_session()
    if outer is None:
        yield None
        return
    outer.suspended += 1
    try:
        yield outer
    finally:
        outer.suspended -= 1


class _Recorder(TorchFunctionMode):
    """Routes every torch-level call made during the forward to `on_call` (the witness's wrapped one;
    without a witness the session is its own function mode: one Python frame per call)."""

    def __init__(self, on_call: Callable[..., Any]) -> None:
        super().__init__()
        self._on_call = on_call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self._on_call(func, args, kwargs or {})


class CallGuard:
    """Per-call checks a capture mode adds (structure-only uses one). Default: none."""

    def before_call(self, info: FuncInfo, func: Any, args: tuple, kwargs: dict, session: "CaptureSession") -> Any:
        """Check the call (raise to refuse it); return None, or a callable run in place of `func` on the same arguments."""
        return None

    def after_call(self, info: FuncInfo, outputs: list, session: "CaptureSession") -> None:
        pass

    def on_error(self, info: FuncInfo, exc: BaseException, session: "CaptureSession",
                 call: tuple = ()) -> "BaseException | StandIn | None":
        """For `exc` raised by `call` (func, args, kwargs): a typed refusal to raise instead, a `StandIn`
        whose output is recorded as the call's, or None to re-raise it."""
        return None

    def common_case(self) -> "GuardFastPath | None":
        """What the C hook (`kernel.native.torch_function`) checks to pass a call without calling `before_call`
        and `after_call`, or None: every call goes through them (the default)."""
        return None


class StandIn:
    """A call's output computed by a guard's declared rule when the kernel itself raised."""

    def __init__(self, output: Any) -> None:
        self.output = output


class CaptureSession(CaptureState, ModuleScopes, TorchFunctionMode):
    """One capture of `model(*args, **kwargs)`; `run` returns the raw material for a Trace.

    The session is the function mode of its own forward (`__torch_function__` is the hot path), so
    a recorded call costs one Python frame. What the kernel reads and writes per call is the slotted
    `kernel.contract.CaptureState` it inherits; everything else is the session's own.
    """

    def __init__(self, model: nn.Module, *, save_values: bool, record_source: bool, guard: CallGuard | None = None,
                 modules: list[tuple[str, nn.Module]] | None = None) -> None:
        super().__init__()
        self.model = model
        self.save_values = save_values
        self.record_source = record_source
        self.guard = guard
        self._guard_fast: tuple | None = None  # the guard's common case, checked in C (`CallGuard.common_case`)
        self.suspended = 0  # >0 while a bridged hook (accelerate offload) runs: nothing is recorded
        self.witness: Any = None  # a tracer.witness.DispatchCensus when CaptureOptions(witness=True)
        self.exits: list[tuple[torch.Tensor, str]] = []  # tensors that left via .numpy()/__dlpack__
        self.value_reads = 0  # calls that read tensor values into Python (`_other_output`)
        self.state_value_reads: dict[str, str] = {}  # parameter/buffer address -> the call that read its values
        self.boundaries: list[tuple[int, str, str]] = []  # (op index, boundary kind, name)
        self.disclosed: set[tuple[str, str]] = set()  # foreign kernels already warned about
        self.swapped: dict[int, tuple[str, Any]] = {}  # id -> (address, weakref) of hook-swapped state
        self.records: list[list] = []
        # id(tensor) -> (op index, tensor). With values saved the tensor is held (the values hold it
        # anyway); without, a weak reference, so no activation outlives its use in the forward.
        self.tmap: dict[int, tuple[int, Any]] = {}
        self._ref: Callable[[torch.Tensor], Any] = (lambda t: t) if save_values else weakref.ref
        self.values: dict[int, torch.Tensor] = {}
        self.value_versions: dict[int, int] = {}
        # storage key -> op indices whose saved value is still the live tensor on that storage (copy-on-write)
        self.shared_storage: dict[int, list[int]] = {}
        self._value_tables = (self.values, self.value_versions, self.shared_storage)  # what `_save` fills, for C
        self.aliased: dict[int, int] = {}  # op index of a value copied for a write through an alias -> the write's
        self.warnings: list[str] = []
        self.transform_warned = False
        self.fast_paths: list[dict[str, str]] = []  # fused paths the plain forward takes and capture did not
        self.recorder: TorchFunctionMode | None = None
        # A weights-free capture's simulated device (tracer.weights_free.simulated_device), when this
        # session's own mode answers its device reads and runs its unrecorded calls: one function mode, not two.
        self.simulated: Any = None
        self.snapshots: dict[int, str] = {}  # id of a pre-write copy of a buffer -> the buffer's address
        self.call_counter = 0
        self.stack: ModuleStack = EMPTY_STACK  # linked: entering a module is O(1) at any depth
        self.frames: list[list] = []
        self.module_calls: dict[str, list] = {}
        self.call_counts: dict[str, int] = {}
        self._site_cache: dict[int, bool] = {}  # id(code) -> whether it is torch's or tracer's own
        self._site_codes: list = []  # the code objects whose ids key _site_cache
        # One shared tuple per distinct (code, line) site and per distinct tensor metadata: a long trace
        # then keeps no per-op copy of them (fewer objects for the cyclic GC to walk, less memory).
        self._sites: dict[tuple, tuple] = {}  # (id(code), offset) -> the shared (code, offset) of R_SITE
        self._prefixes = _internal_prefixes()  # file prefixes of torch's and tracer's own code (skipped by the site)
        self._metas: dict[tuple, tuple] = {}
        self.param_ids: dict[int, str] = {}
        self.buffer_ids: set[int] = set()
        self.tied: dict[str, list[str]] = {}
        self.module_addr: dict[int, str] = {}
        self._index_model(modules)

    # -- setup ---------------------------------------------------------------------
    def _index_model(self, every: list[tuple[str, nn.Module]] | None) -> None:
        """Index every parameter and buffer by id (the first address found names it; later ones are its
        tied addresses) and every module by id, at its first address."""
        if every is None:  # iterative walks: linear at any nesting depth
            every = named_modules(self.model, remove_duplicate=False)
        self.every = every
        param_ids, tied, buffer_ids = self.param_ids, self.tied, self.buffer_ids
        for table in ("_parameters", "_buffers"):
            for name, t in named_state(self.model, table, remove_duplicate=False, modules=every):
                first = param_ids.get(id(t))
                if first is None:
                    param_ids[id(t)] = name
                    tied[name] = []
                    if table == "_buffers":
                        buffer_ids.add(id(t))
                else:
                    tied[first].append(name)
        self.named = first_visits(every)
        self.module_addr.update({id(m): name for name, m in self.named})

    # -- run -----------------------------------------------------------------------
    def run(self, args: tuple, kwargs: dict, grad_context: Any) -> Any:
        """Run the forward under capture; the module wrappers and the mode are always removed."""
        self._record_inputs(args, kwargs)
        try:
            self._guard_fast = self.guard.common_case() if self.guard is not None else None
            if _TORCH_FUNCTION is not None and ((self.guard is None and self.simulated is None) or self._guard_fast):
                # the mode's hook in C for the forward (removed below: no cycle stays); a guard without a common
                # case in C (distributed, a chain) checks every call in Python's hook
                self.__torch_function__ = MethodType(_TORCH_FUNCTION, self)
            self._install_scopes()
            witness = self.witness  # the census wraps on_call only when it is on
            recorder = self if witness is None else _Recorder(witness.wrap(self.on_call))
            self.recorder = recorder  # fast_paths.FusedCall lifts it around a fused kernel
            outer = active_session()  # a capture inside a captured forward: the outer one records this forward
            _ACTIVE.session = self
            if outer is not None:
                outer.suspended -= 1  # suspended by `outer_suspended` for the inner capture's own work
            try:
                with grad_context, recorder, \
                        (witness if witness is not None else contextlib.nullcontext()), \
                        _boundaries.function_boundaries(self):  # Function.apply, restored on exit
                    output = self.model(*args, **kwargs)
            finally:
                _ACTIVE.session = outer
                if outer is not None:
                    outer.suspended += 1
        finally:
            self._remove_scopes()
            self.__dict__.pop("__torch_function__", None)
            self._guard_fast = None
            self.recorder = None  # the mode is this session: no self-cycle outlives the forward
        self._record_outputs(output)
        return output

    def _indices_of(self, tensors: list) -> tuple[int, ...]:
        out = []
        for t in tensors:
            hit = self.tmap.get(id(t))
            if hit is not None and _held(hit[1], t):
                out.append(hit[0])
        return tuple(out)

    # -- inputs and outputs --------------------------------------------------------------
    def _record_inputs(self, args: tuple, kwargs: dict) -> None:
        for path, t in iter_tensors(list(args), "args"):
            self._record_io_input(t, path)
        for path, t in iter_tensors(dict(kwargs), "kwargs"):
            self._record_io_input(t, path)

    def _record_io_input(self, t: torch.Tensor, path: str) -> None:
        if id(t) in self.tmap or id(t) in self.param_ids:
            return
        self._new_synthetic(_IO_INPUT, t, (), (), path)

    def _record_outputs(self, output: Any) -> None:
        for path, t in iter_tensors(output, ""):
            parents: tuple = ()
            params: tuple = ()
            addr = self.param_ids.get(id(t))
            if addr is not None:
                params = (addr,)
            else:
                hit = self.tmap.get(id(t))
                found = hit[0] if hit is not None and _held(hit[1], t) else self._adopt(t)
                if isinstance(found, str):
                    params = (found,)
                else:
                    parents = ((found, "0"),)
            self._new_synthetic(_IO_OUTPUT, t, parents, params, path, keep_value=False)

    def _new_synthetic(self, info: FuncInfo, t: torch.Tensor, parents: tuple, params: tuple, io: str, keep_value: bool = True) -> int:
        self.call_counter += 1
        idx = len(self.records)
        held = t if self.save_values else None
        rec = _record(info=info, parents=parents, tensor=held, meta=_meta(t), call=self.call_counter, out_idx=0,
                      n_out=1, stack=self.stack, params=params, writes=(), inplace=False, io=io)
        self.records.append(rec)
        if keep_value:
            self.tmap[id(t)] = (idx, self._ref(t))
            if self.save_values:
                self._save(idx, t)
        return idx

    def _adopt(self, t: torch.Tensor) -> int | str:
        """A tensor never seen before: a parameter swapped in by a hook (its address), or a constant (its op index)."""
        addr = self._find_swapped_state(t)
        if addr is not None:
            return addr
        if self.exits:  # a tensor re-entering after a numpy/DLPack exit
            return self._reenter(t)
        return self._new_synthetic(_CONSTANT, t, (), (), "")

    # -- TorchScript modules --------------------------------------------------------
    def _script_forward(self, module: torch.jit.ScriptModule, forward: Callable[..., Any]) -> Callable[..., Any]:
        """`forward` of a TorchScript module, recorded as one boundary op that reads the module's parameters
        and buffers (the function mode sees nothing inside TorchScript); disclosed once per module type."""
        call = _boundaries.ScriptCall(module, forward)
        kind, name = _boundaries.SCRIPT_KIND, call.info.qualname
        ids = self.param_ids
        reads = tuple(dict.fromkeys(ids[id(t)] for t in (*module.parameters(), *module.buffers()) if id(t) in ids))

        def recorded(*args: Any, **kwargs: Any) -> Any:
            _boundaries.disclose(self, kind, name, stacklevel=6)  # the line that called the module
            start = len(self.records)
            out = self.on_call(call, args, kwargs)
            for i in range(start, len(self.records)):
                rec = self.records[i]
                rec[R_PARAMS] = tuple(dict.fromkeys((*rec[R_PARAMS], *reads)))
                self.boundaries.append((i, kind, name))
            return out
        return recorded

    # -- numpy / DLPack round trips -------------------------------------------------
    def _reenter_call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        if isinstance(out, _Tensor):
            self._reenter(out)
        return out

    def _reenter(self, t: torch.Tensor) -> int:
        """Record `t` as a round-trip boundary op fed by the tensors that left since the last one."""
        exits, self.exits = self.exits, []
        parents: list = []
        params: list = []
        for i, (left, _kind) in enumerate(exits):
            self._arg(left, _POS[i] if i < 64 else str(i), parents, params, None, self.tmap, self.param_ids)
        kind = _boundaries.roundtrip_kind([k for _t, k in exits])
        info = _ROUNDTRIP_INFO[kind]
        idx = self._new_synthetic(info, t, tuple(parents), tuple(params), "")
        rec = self.records[idx]
        rec[R_SITE] = self._site() if self.record_source else None
        if self.save_values:
            rec[R_CALLSPEC] = (_boundaries.OpaqueRoundTrip(kind), tuple(left for left, _k in exits), {})
        self.boundaries.append((idx, kind, info.qualname))
        _boundaries.disclose(self, kind, info.qualname)
        return idx

    def _find_swapped_state(self, t: torch.Tensor) -> str | None:
        """The address of a parameter or buffer a hook swapped in during the call (accelerate's
        offload hooks replace module._parameters / _buffers entries), else None.

        Swapped tensors are remembered by id with a weak reference, so a later tensor that reuses
        a freed id is never mistaken for one, and no materialized weight is kept alive.
        """
        hit = self.swapped.get(id(t))
        if hit is not None and hit[1]() is t:
            return hit[0]
        for addr, _call in reversed(self.stack):
            module = self.model.get_submodule(addr) if addr else self.model
            for table in (module._parameters, module._buffers):
                for name, p in table.items():
                    if p is t:
                        full = f"{addr}.{name}" if addr else name
                        canonical = next((k for k, v in self.tied.items() if k == full or full in v), full)
                        self.swapped[id(t)] = (canonical, weakref.ref(t))
                        return canonical
        return None

    # -- the hot path ------------------------------------------------------------------------
    def on_call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Record one call (made by the witness, a boundary op or a fused path), as the function mode does."""
        return self.__torch_function__(func, (), args, kwargs)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        simulated = self.simulated
        if simulated is not None:  # a weights-free capture's simulated device answers the model's device reads
            answer = simulated.read(func, args)
            if answer is not None:
                return answer
        if self.suspended:  # inside a bridged hook or an autograd Function's forward: run, do not record
            return func(*args, **kwargs) if simulated is None else simulated.call(func, args, kwargs)
        if _in_functorch_transform() is not None:  # inside torch.vmap/grad: wrapped tensors must not escape
            return self._transform_call(func, args, kwargs)
        try:
            info = _INFO_CACHE[func]
        except (KeyError, TypeError):  # first call of `func`, or an unhashable callable
            info = func_info(func)
        if info.metadata_only:
            return func(*args, **kwargs)
        if self.exits and info.kind in _boundaries.REENTRY_KINDS and args and _boundaries.is_foreign_array(args[0]):
            return self._reenter_call(func, args, kwargs)  # torch.tensor(ndarray) after .numpy()
        guard = self.guard
        if guard is not None:
            func = guard.before_call(info, func, args, kwargs, self) or func
        watched: list | None = None
        tmap = self.tmap
        param_ids = self.param_ids
        save = self.save_values
        # Arguments: tensors become edges, parameters and buffers become attributions.
        scanned = _SCAN_ARGS(args, kwargs, tmap, param_ids, self.buffer_ids, save) if _SCAN_ARGS is not None else None
        if scanned is not None:  # the C scan (kernel/native.py): every tensor argument an earlier op's or a parameter
            parents, params, scrubbed, nested = scanned
        else:
            parents, params, scrubbed, nested, watched = self._scan_args(args)
            if kwargs:
                for k, a in kwargs.items():
                    if isinstance(a, _Tensor):
                        watched = self._arg(a, k, parents, params, watched, tmap, param_ids)
        inplace = info.inplace
        if kwargs and (kwargs.get("inplace") is True or (kwargs.get("out") is not None
                                                         and isinstance(kwargs.get("out"), _Tensor))):
            inplace = True
        target = None
        before = None
        if inplace:
            target = kwargs.get("out") if isinstance(kwargs.get("out"), _Tensor) else (
                args[0] if args and isinstance(args[0], _Tensor) else _written_kwarg(kwargs))
            if target is not None and save:
                self._protect(target)
                if id(target) in param_ids:  # a write into a parameter or buffer: keep its value before
                    before = target.detach().clone()
        try:
            out = func(*args, **kwargs)
        except BaseException as exc:
            out = self._failed(exc, info, guard, func, args, kwargs)
        # Outputs: one record per tensor produced.
        if isinstance(out, _Tensor):
            outs = (out,)
        elif type(out) is tuple or type(out) is list or isinstance(out, tuple):
            outs = tuple(shallow_tensors(out))
            if not outs:
                return self._other_output(info, args, out)
        elif out is None and target is not None:
            outs = (target,)  # __setitem__ and friends return None
        else:
            return self._other_output(info, args, out)
        writes = ()
        if watched:
            if info.kind in _RUNNING_STAT_KINDS and _updates_running_stats(info.kind, args, kwargs):
                writes = tuple(addr for addr, _t, _v in watched)  # the kernel updates them without a version bump
            else:
                writes = tuple(addr for addr, t, v in watched if _version(t) != v)
        site = (self._site() if _SITE is None else _SITE(self._site_cache, self._site_codes, self._sites, self._prefixes)
                ) if self.record_source else None
        self.call_counter += 1
        call_id = self.call_counter
        n = len(outs)
        stack = self.stack
        ref = self._ref
        spec = (func, args, kwargs) if save else None
        if before is not None:
            spec = self._with_before(spec, target, before)
        if save:
            s_args = s_kwargs = None
        else:  # the call template's source: no tensor held, and no object the collector must track
            s_args = scrub_deep(args) if nested else (scrubbed if scrubbed is not None else args)
            s_kwargs = scrub_kwargs(kwargs) if kwargs else None
        ptuple = parents if type(parents) is tuple else tuple(parents)
        pa = params if type(params) is tuple else tuple(params)
        records = self.records
        metas = self._metas
        call_rec = _record(info=info, parents=ptuple, call=call_id, out_idx=0, n_out=n, stack=stack, params=pa,
                           writes=writes, inplace=inplace, site=site, io="", callspec=spec, args=s_args,
                           kwargs=s_kwargs)
        if _RECORD_OUTPUTS is not None and not inplace:  # the C loop (kernel/native.py), same records
            _RECORD_OUTPUTS(outs, tuple(call_rec), records, metas, tmap, param_ids, save, self._value_tables)
            if guard is not None:
                guard.after_call(info, list(outs), self)
            return out
        for k, t in enumerate(outs):
            idx = len(records)
            meta = (t.shape, t.dtype, t.device, t.requires_grad)  # as `_meta`
            rec = call_rec.copy()
            rec[R_TENSOR], rec[R_META], rec[R_OUT_IDX] = t if save else None, metas.setdefault(meta, meta), k
            records.append(rec)
            tid = id(t)
            if tid in param_ids:  # an in-place write to a buffer keeps its parameter identity
                if save and inplace:
                    self.values[idx] = t.detach().clone()  # the value it wrote, as it was then
                    self.value_versions[idx] = -2
                continue
            tmap[tid] = (idx, t if save else ref(t))
            if inplace:
                base = t._base
                if base is not None and id(base) in tmap:
                    tmap[id(base)] = (idx, base if save else ref(base))
            if save:
                self._save(idx, t)
        if guard is not None:
            guard.after_call(info, list(outs), self)
        return out

    # The whole call in Python: the class's hook, and where the C hook (kernel.native.torch_function) sends every
    # call it does not record itself.
    _torch_function_py = __torch_function__

    def _failed(self, exc: BaseException, info: FuncInfo, guard: CallGuard | None, func: Any, args: tuple,
                kwargs: dict) -> Any:
        """A recorded call raised `exc`: noted with where it was raised, then raised again (typed where the guard
        types it), or the output the guard substitutes (a `StandIn`: a declared meta fallback)."""
        self._annotate(exc, info)
        typed = guard.on_error(info, exc, self, (func, args, kwargs)) if guard is not None else None
        if typed is None:
            raise exc
        if not isinstance(typed, StandIn):
            raise typed from exc
        return typed.output

    def _other_output(self, info: FuncInfo, args: tuple, out: Any) -> Any:
        """A recorded call's result that holds no tensor (the C hook's case of `__torch_function__`'s last branch)."""
        if info.kind in _boundaries.ROUNDTRIP_KINDS and args and isinstance(args[0], _Tensor):
            self.exits.append((args[0], info.kind))  # a tensor left torch
        if info.value_read:  # values read into Python (.item(), .tolist(), float(t)): what capture.gaps reports
            self.value_reads += 1
            if args and isinstance(args[0], _Tensor):
                addr = self.param_ids.get(id(args[0]))
                if addr is not None:
                    self.state_value_reads.setdefault(addr, info.qualname)
        return out

    def _scan_args(self, args: tuple) -> tuple:
        """The argument scan in Python (lists of parents and params, scrubbed args, nested, watched buffers):
        what the C scan returns, for every case it leaves to Python."""
        parents: list = []
        params: list = []
        watched: list | None = None
        nested = False
        tmap = self.tmap
        param_ids = self.param_ids
        save = self.save_values
        scrubbed: list | None = None  # args with each top-level tensor replaced by TENSOR (save="none")
        i = 0
        for a in args:
            if isinstance(a, _Tensor):
                if not save:
                    if scrubbed is None:
                        scrubbed = list(args)
                    scrubbed[i] = TENSOR
                hit = tmap.get(id(a))  # the common case inline: a tensor an earlier op produced
                if hit is not None and (hit[1] is a or (type(hit[1]) is _WeakRef and hit[1]() is a)) \
                        and id(a) not in param_ids:
                    parents.append((hit[0], _POS[i] if i < 64 else str(i)))
                else:
                    watched = self._arg(a, _POS[i] if i < 64 else str(i), parents, params, watched, tmap, param_ids)
            elif type(a) in _SEQ and a and isinstance(a[0], _Tensor):
                nested = True
                for j, b in enumerate(a):
                    if isinstance(b, _Tensor):
                        watched = self._arg(b, f"{i}.{j}", parents, params, watched, tmap, param_ids)
            i += 1
        return parents, params, (tuple(scrubbed) if scrubbed is not None else None), nested, watched

    def _transform_call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run a call made inside a functorch transform unrecorded; its result enters the trace as a constant."""
        if not self.transform_warned:
            self.transform_warned = True
            site = self.site_text()
            self.warnings.append(
                "calls inside a functorch transform (torch.vmap, torch.func.grad, or one torch runs inside a call, "
                f"as flex attention's mask does) are not recorded op by op{f', first at {site}' if site else ''}; "
                "what the transform returns enters the trace as a constant (no edge to the tensors it read)")
        return func(*args, **kwargs) if self.simulated is None else self.simulated.call(func, args, kwargs)

    def _arg(self, t, pos, parents, params, watched, tmap, param_ids):
        tid = id(t)
        addr = param_ids.get(tid)
        if addr is not None:
            params.append(addr)
            if tid in self.buffer_ids:
                if watched is None:
                    watched = []
                watched.append((addr, t, _version(t)))
            return watched
        hit = tmap.get(tid)
        if hit is not None and (hit[1] is t or (type(hit[1]) is _WeakRef and hit[1]() is t)):
            parents.append((hit[0], pos))
            return watched
        found = self._adopt(t)
        if isinstance(found, str):
            params.append(found)
        else:
            parents.append((found, pos))
        return watched

    # -- values -------------------------------------------------------------------------
    def _with_before(self, spec: tuple, target: torch.Tensor, before: torch.Tensor) -> tuple:
        """The live call with the written parameter/buffer replaced by its value before the write."""
        func, args, kwargs = spec
        self.snapshots[id(before)] = self.param_ids[id(target)]
        if kwargs.get("out") is target:
            return func, args, {**kwargs, "out": before}
        return func, (before, *args[1:]), kwargs

    def _save(self, idx: int, t: torch.Tensor) -> None:
        self.values[idx] = t
        self.value_versions[idx] = _version(t)
        self.shared_storage.setdefault(_storage_key(t), []).append(idx)

    def _protect(self, target: torch.Tensor) -> None:
        """Before an in-place write, copy every saved value that still lives on the written storage.

        Copy-on-write: a view, its base, a sibling view or an alias shares the storage (and the version
        counter) with `target`, so the write would change it or make it look changed; each saved value
        is copied at most once, at the first write to its storage, and never when nothing writes.
        """
        held = self.shared_storage.pop(_storage_key(target), None)
        if not held:
            return
        values, records = self.values, self.records
        base = target._base
        for idx in held:
            saved = values.get(idx)
            if saved is not None and saved is records[idx][R_TENSOR]:
                if not _backed(saved):  # its storage was freed behind the capture (FSDP resizes it to 0 after a
                    del values[idx]  # layer): no value is left to keep, and its old address may be another's now
                    continue
                values[idx] = saved.detach().clone()
                if saved is not target and saved is not base:  # readers of it keep their edge to idx
                    self.aliased[idx] = len(records)

    def finished_values(self) -> dict[int, torch.Tensor]:
        """Saved values by op index, detached; values changed behind the capture are dropped."""
        out = {}
        for idx, t in self.values.items():
            if t is self.records[idx][R_TENSOR] and _version(t) != self.value_versions[idx]:
                self.warnings.append(
                    f"the value of op #{idx} ({self.records[idx][R_INFO].qualname}) was changed in place "
                    "through a view or alias after it was produced; it is not saved, and ops that read it "
                    "afterwards may depend on that in-place op without an edge saying so"
                )
                continue
            out[idx] = t.detach()
        if self.aliased:
            self._disclose_alias_reads()
        return out

    def _disclose_alias_reads(self) -> None:
        """Warn where an op read a tensor after a write through an alias changed it, with its edge to the old value."""
        readers: dict[int, int] = {}
        for r, rec in enumerate(self.records):
            for p, _pos in rec[R_PARENTS]:
                if p in self.aliased and r > self.aliased[p] and p not in readers:
                    readers[p] = r
        for idx, r in readers.items():
            live, saved = self.records[idx][R_TENSOR], self.values[idx]
            if torch.equal(live, saved):  # the write did not reach its elements
                continue
            w = self.aliased[idx]
            self.warnings.append(
                f"the value of op #{idx} ({self.records[idx][R_INFO].qualname}) was changed in place through a "
                f"view or alias by op #{w} ({self.records[w][R_INFO].qualname}); op #{r} "
                f"({self.records[r][R_INFO].qualname}) reads it afterwards without an edge to that write (the "
                "value saved is the one produced, so validation names the reader)")

    # -- sites and errors -------------------------------------------------------------------
    def _site(self):
        """The shared (code, instruction offset) of the innermost frame outside torch and tracer, or None.

        The offset, not the line: a frame's line number is found by scanning its code's line table
        (microseconds at the end of a long forward); `line_at` turns the offset into it once per site.
        Keyed by the code object's id (held here, so the id stays its own): hashing a code object
        hashes its bytecode and constants.
        """
        f = sys._getframe(2)
        cache = self._site_cache
        while f is not None:
            code = f.f_code
            internal = cache.get(id(code))
            if internal is None:
                internal = code.co_filename.startswith(self._prefixes)
                cache[id(code)] = internal
                self._site_codes.append(code)  # keeps the id taken
            if not internal:
                key = (id(code), f.f_lasti)
                site = self._sites.get(key)
                if site is None:
                    site = self._sites[key] = (code, key[1])
                return site
            f = f.f_back
        return None

    def site_text(self) -> str | None:
        """`file:line in function` of the innermost frame outside torch and tracer: the user's code."""
        site = self._site()
        return f"{site[0].co_filename}:{line_at(site[0], site[1])} in {site[0].co_name}" if site else None

    def _annotate(self, exc: BaseException, info: FuncInfo) -> None:
        if getattr(exc, "_tlx_annotated", False):
            return
        module = self.stack[-1] if self.stack else ("", 0)
        where = f"module '{module[0] or type(self.model).__name__}'" + (f" (call {module[1]})" if module[1] else "")
        site = self.site_text()
        at = f" at {site}" if site else ""
        try:
            exc.add_note(f"torchlens-explore: raised by {info.qualname} (op #{len(self.records)}) in {where}{at}")
            exc._tlx_annotated = True  # type: ignore[attr-defined]
        except Exception:
            pass


# Kernels that update running statistics in place without bumping the version counter,
# with the position and name of the flag that turns the update on.
_RUNNING_STAT_KINDS = {"batch_norm": (5, "training"), "instance_norm": (5, "use_input_stats")}


def _updates_running_stats(kind: str, args: tuple, kwargs: dict) -> bool:
    pos, name = _RUNNING_STAT_KINDS[kind]
    flag = args[pos] if len(args) > pos else kwargs.get(name, False)
    return bool(flag)


def _held(ref: Any, t: torch.Tensor) -> bool:
    """Whether a tmap reference (the tensor itself, or a weak reference to it) is `t`."""
    return ref is t or (type(ref) is _WeakRef and ref() is t)


_WeakRef = weakref.ReferenceType


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors carry no version counter
        return -1


def _written_kwarg(kwargs: dict) -> torch.Tensor | None:
    """The target of an in-place call given by keyword (`nn.init.uniform_(tensor=w)`, as torch's
    function handling passes it), else None."""
    for name in ("tensor", "input", "self"):
        t = kwargs.get(name)
        if isinstance(t, _Tensor):
            return t
    return None


def _backed(t: torch.Tensor) -> bool:
    """Whether `t`'s storage still holds every element `t` views (False once it was resized smaller, as FSDP
    frees an all-gathered parameter's storage: reading `t` would then read freed memory)."""
    if t.numel() == 0:
        return True
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, TypeError):  # storage-less tensors: nothing to check
        return True
    extent = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    return nbytes >= extent * t.element_size()


def _storage_key(t: torch.Tensor) -> int:
    """Tensors that may share memory share this key (their storage's address; the tensor's id if it has none)."""
    try:
        return t.untyped_storage().data_ptr() or id(t)
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested and other storage-less tensors
        return id(t)


def line_at(code: Any, offset: int) -> int:
    """The source line of the instruction at byte `offset` of `code` (a frame's `f_lineno` for that `f_lasti`).

    Each code object's line table is read once (`co_lines` is a scan of the whole function; a long
    forward has dozens of sites in the same few functions) and kept, keyed by the code's id with the
    code itself held so the id stays its own, up to _MAX_LINE_TABLES codes.
    """
    hit = _LINE_TABLES.get(id(code))
    if hit is None or hit[0] is not code:
        if len(_LINE_TABLES) >= _MAX_LINE_TABLES:
            _LINE_TABLES.clear()
        starts, ends, lines = [], [], []
        for start, end, line in code.co_lines():  # ascending, non-overlapping ranges
            if line is not None and start < end:
                starts.append(start)
                ends.append(end)
                lines.append(line)
        hit = _LINE_TABLES[id(code)] = (code, starts, ends, lines)
    _code, starts, ends, lines = hit
    i = bisect.bisect_right(starts, offset) - 1
    return lines[i] if i >= 0 and offset < ends[i] else code.co_firstlineno


_LINE_TABLES: dict[int, tuple] = {}
_MAX_LINE_TABLES = 4096


def _meta(t: torch.Tensor) -> tuple:
    """Shape (a torch.Size, read as a tuple), dtype, device and grad flag: the record's R_META."""
    return (t.shape, t.dtype, t.device, t.requires_grad)


_IO_INPUT = FuncInfo("input", "input", False, False, False)
_IO_OUTPUT = FuncInfo("output", "output", False, False, False)
_CONSTANT = FuncInfo("constant", "constant", False, False, False)
_ROUNDTRIP_INFO = {k: FuncInfo(k, k.replace("_", "."), False, False, False)
                   for k in ("numpy_roundtrip", "dlpack_roundtrip")}
