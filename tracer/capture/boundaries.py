"""Foreign-kernel boundaries: computation the function mode cannot see inside.

Three kinds, each recorded as one boundary op and disclosed once per class per capture
with a `ForeignKernelWarning`:

* `autograd_function`: a `torch.autograd.Function.apply` call. The mode never sees `apply`
  (only the ops inside `forward`, and not at all what a Triton or C++ kernel does there),
  so `Function.apply` is replaced, once per process and under a lock, by a pass-through
  wrapper that looks up the current thread's capture: with one, it records one op
  (parents: its tensor inputs; outputs: its outputs; func: the Function's qualified name)
  and suspends recording inside; without one (another thread, no capture, replay) it calls
  the original `apply` straight through. It is never removed, so a capture ending on one
  thread cannot stop another thread's capture from recording. Functions of
  `TRANSPARENT_PACKAGES` stay transparent.
* `numpy_roundtrip` / `dlpack_roundtrip`: a tensor leaves through `.numpy()`,
  `__array__` or `__dlpack__` and a tensor comes back (`torch.from_numpy`,
  `torch.from_dlpack`, `torch.tensor(ndarray)`). The re-entering tensor becomes a
  boundary op whose parents are the tensors that left since the last boundary. Its code
  ran outside torch, so replay refuses it typed (`foreign_kernel_not_replayable`).
* torch.library custom ops are dispatcher ops the mode sees as one call already;
  `describe_op_overload` names them (`torch.ops.ns.op`, kind `ns_op`).
* `script_module`: a call of a TorchScript module (`torch.jit.script` / `torch.jit.trace`) inside
  the model. Its code runs in TorchScript's interpreter, where the mode sees nothing, so the capture
  records the call as one boundary op (parents: its tensor inputs; parameters: the script module's)
  through `ScriptCall`, named by TorchScript's qualified name of the module's type. Replay calls the
  module again (offline: when allowed with `tracer.offline_callables(module)`).
"""
from __future__ import annotations

import contextlib
import re
import threading
import warnings
from typing import Any, Iterable, Iterator

import torch

from ..errors import ForeignKernelNotReplayableError
from .functions import FuncInfo, _cache as _func_info_cache

FUNCTION_KIND = "autograd_function"
SCRIPT_KIND = "script_module"
ROUNDTRIP_KINDS = {"numpy": "numpy_roundtrip", "array": "numpy_roundtrip", "dlpack": "dlpack_roundtrip"}
# Calls the mode sees that turn a foreign array back into a tensor.
REENTRY_KINDS = frozenset({"tensor", "as_tensor", "asarray", "from_numpy", "from_dlpack"})


class ForeignKernelWarning(UserWarning):
    """A foreign kernel ran inside the forward: recorded as one opaque boundary op."""


# -- naming --------------------------------------------------------------------------------
def describe_op_overload(func: Any) -> FuncInfo | None:
    """FuncInfo for a dispatcher op (`torch.ops.ns.op[.overload]`); None for anything else."""
    if not isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return None
    qualified = func._qualified_op_name if isinstance(func, torch._ops.OpOverloadPacket) else func.name()
    ns, _, name = qualified.partition("::")
    overload = getattr(func, "_overloadname", "default")
    qualname = f"torch.ops.{ns}.{name}" + ("" if overload in ("default", "") else f".{overload}")
    kind = name if ns == "aten" else f"{ns}_{name}"
    inplace = name.endswith("_") and not name.startswith("_")
    return FuncInfo(kind=kind, qualname=qualname, inplace=inplace, metadata_only=False, value_read=False)


def kernel_name(kernel: Any) -> str:
    """The `Op.func` a foreign kernel is recorded under: a Function class, custom op, or that string."""
    if isinstance(kernel, str):
        return kernel
    if isinstance(kernel, type) and issubclass(kernel, torch.autograd.Function):
        return f"{kernel.__module__}.{kernel.__qualname__}"
    if isinstance(kernel, torch.jit.ScriptModule):
        return script_name(kernel)
    info = describe_op_overload(kernel)
    if info is not None:
        return info.qualname
    qualified = getattr(kernel, "_qualname", None)  # torch.library.custom_op's CustomOpDef
    if isinstance(qualified, str) and "::" in qualified:
        ns, _, name = qualified.partition("::")
        return f"torch.ops.{ns}.{name}"
    raise TypeError(f"not a foreign kernel: {kernel!r} (pass a Function class, a custom op, a TorchScript module "
                    f"or its name)")


# -- autograd Functions ----------------------------------------------------------------------
_ORIGINAL_APPLY = torch.autograd.Function.__dict__["apply"]
# torch's own `Function.apply` code, also once the pass-through below replaces it (frames are matched by it)
TORCH_APPLY_CODE = _ORIGINAL_APPLY.__func__.__code__
_active = threading.local()


def _suspended(fn: Any, args: tuple, kwargs: dict) -> Any:
    """`fn(*args, **kwargs)` with this thread's capture not recording (a boundary's inside is not recorded);
    a plain call without one (replay, or a call outside any capture)."""
    session = getattr(_active, "session", None)
    if session is None:
        return fn(*args, **kwargs)
    session.suspended += 1
    try:
        return fn(*args, **kwargs)
    finally:
        session.suspended -= 1


class _FunctionCall:
    """`cls.apply` as a recorded call: suspends recording while it runs under a capture."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.apply = _ORIGINAL_APPLY.__get__(None, cls)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _suspended(self.apply, args, kwargs)

    def __repr__(self) -> str:
        return f"{kernel_name(self.cls)}.apply"


_CALLS: dict[type, _FunctionCall] = {}


def _call_for(cls: type) -> _FunctionCall:
    call = _CALLS.get(cls)
    if call is None:
        call = _CALLS[cls] = _FunctionCall(cls)
        _func_info_cache[call] = FuncInfo(FUNCTION_KIND, kernel_name(cls), False, False, False)
    return call


# Packages whose Functions stay transparent (their inner ops recorded as before): torch's own,
# and bitsandbytes, whose quantized matmuls the bitsandbytes bridge discloses op by op.
TRANSPARENT_PACKAGES = ("torch", "bitsandbytes")


def _transparent(cls: type) -> bool:
    return cls.__module__.partition(".")[0] in TRANSPARENT_PACKAGES


def _wrapped_apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    session = getattr(_active, "session", None)  # this thread's capture (thread-local)
    if session is None or session.suspended or _transparent(cls):
        return _ORIGINAL_APPLY.__get__(None, cls)(*args, **kwargs)
    name = kernel_name(cls)
    disclose(session, FUNCTION_KIND, name, stacklevel=3)  # the line that called apply
    start = len(session.records)
    out = session.on_call(_call_for(cls), args, kwargs)
    session.boundaries.extend((i, FUNCTION_KIND, name) for i in range(start, len(session.records)))
    return out


PASS_THROUGH = classmethod(_wrapped_apply)
_INSTALL_LOCK = threading.Lock()


def install_pass_through() -> None:
    """Install the `Function.apply` pass-through (once per process; idempotent, under a lock)."""
    with _INSTALL_LOCK:
        if torch.autograd.Function.__dict__["apply"] is not PASS_THROUGH:
            torch.autograd.Function.apply = PASS_THROUGH  # type: ignore[method-assign]


def apply_is_torchs() -> bool:
    """True while `Function.apply` is torch's own or the pass-through (which calls torch's outside a capture)."""
    installed = torch.autograd.Function.__dict__["apply"]
    return installed is PASS_THROUGH or installed is _ORIGINAL_APPLY


@contextlib.contextmanager
def function_boundaries(session: Any) -> Iterator[None]:
    """`Function.apply` records boundary ops for `session` on this thread only, until exit."""
    install_pass_through()
    previous = getattr(_active, "session", None)
    _active.session = session
    try:
        yield
    finally:
        _active.session = previous


# -- TorchScript modules -----------------------------------------------------------------------
_MANGLE = re.compile(r"___torch_mangle_\d+\.")


def script_name(module: torch.jit.ScriptModule) -> str:
    """TorchScript's qualified name of a script module's type (`__torch__.mymodel.Block`), without the
    `___torch_mangle_<n>.` part TorchScript adds per compile (the same module scripted twice names one type)."""
    try:
        return _MANGLE.sub("", module._c._type().qualified_name())
    except Exception:  # a script module without a compiled type: its original class name
        return f"torch.jit.{getattr(module, 'original_name', type(module).__name__)}"


def outside_scripts(walk: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """The `(address, module)` pairs of a pre-order module walk, less the modules inside a TorchScript
    module (they run within it, never called from Python); the script modules themselves stay."""
    inside = None  # the address prefix of the script module last walked
    for address, module in walk:
        if inside is not None and (address + ".").startswith(inside):
            continue
        yield address, module
        if isinstance(module, torch.jit.ScriptModule):
            inside = f"{address}." if address else ""


class ScriptCall:
    """A TorchScript module's forward as a recorded call: nothing inside it is recorded (it runs outside
    Python), and Python code it calls back into (`@torch.jit.ignore`) runs with recording suspended.

    Described by `info`, not cached by function object (`__hash__` is None): one is made per script module
    per capture, and a cache entry would keep the module alive.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, module: torch.jit.ScriptModule, forward: Any) -> None:
        self.module = module
        self.forward = forward  # the module's own forward (its script method)
        self.info = FuncInfo(SCRIPT_KIND, script_name(module), False, False, False, func=self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _suspended(self.forward, args, kwargs)

    def __repr__(self) -> str:
        return f"{self.info.qualname}.forward"


# -- numpy / DLPack round trips ----------------------------------------------------------------
class OpaqueRoundTrip:
    """The live call of a round-trip boundary: its code ran outside torch, so replay refuses."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ForeignKernelNotReplayableError(
            f"a {self.kind.replace('_', ' ')} ran outside torch; its code was not recorded and cannot be replayed",
            site=self.kind, boundary=self.kind)


def is_foreign_array(x: Any) -> bool:
    """True for a numpy array or another object that leaves/enters torch through DLPack."""
    mod = type(x).__module__
    return mod == "numpy" or mod.startswith("numpy.") or (not isinstance(x, torch.Tensor) and hasattr(x, "__dlpack__"))


def roundtrip_kind(exit_kinds: list[str]) -> str:
    """The boundary kind for the exits since the last boundary (DLPack wins when mixed)."""
    kinds = {ROUNDTRIP_KINDS[k] for k in exit_kinds}
    return "dlpack_roundtrip" if "dlpack_roundtrip" in kinds else "numpy_roundtrip"


# -- disclosure --------------------------------------------------------------------------------
_WHAT = {
    FUNCTION_KIND: "autograd Function {name} ran as one boundary op; the ops inside its forward are not recorded",
    SCRIPT_KIND: "TorchScript module {name} ran as one boundary op; the ops inside it are not recorded",
    "higher_order_op": "higher-order op {name} ran as one boundary op; its branches or body are not recorded op by "
                       "op, and parameters they read without taking them as operands are not attributed to it",
    "numpy_roundtrip": "a numpy round trip ran inside the forward; it is recorded as one boundary op whose "
                       "parents are the tensors that left torch, and it cannot be replayed",
    "dlpack_roundtrip": "a DLPack round trip ran inside the forward; it is recorded as one boundary op whose "
                        "parents are the tensors that left torch, and it cannot be replayed",
}


def disclose(session: Any, kind: str, name: str, stacklevel: int = 4) -> None:
    """Warn once per (kind, class) per capture; the sentence also goes to `trace.warnings`."""
    key = (kind, name)
    if key in session.disclosed:
        return
    session.disclosed.add(key)
    msg = "foreign kernel: " + _WHAT[kind].format(name=name)
    session.warnings.append(msg)
    warnings.warn(msg, ForeignKernelWarning, stacklevel=stacklevel)


def report(ops: tuple, session: Any, findings: Any) -> None:
    """The boundary ops as `Provenance.foreign_kernels` (op label -> boundary kind and name)."""
    if session.boundaries:
        findings.add(foreign_kernels={ops[idx].label: {"boundary": kind, "name": name}
                                      for idx, kind, name in session.boundaries})
