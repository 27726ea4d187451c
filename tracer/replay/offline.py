"""Replay without live calls: rebuild each op's call from its stored template (`Op.attrs`).

A trace loaded from a file has its saved values and, per op, the call template written at
capture (see `tracer.capture.call_template`). Parameters and buffers are not in a trace file:
the caller supplies them (`params=model`, or a mapping such as its state dict).

What a stored call may name: a torch callable (resolved under `torch` alone), a custom op already
registered in this process (`torch.ops.<ns>.<op>.<overload>`), or, for an `autograd.Function` op, the
Function class named by its qualified name, found only in a module this process has already imported
(`sys.modules`, read through `__dict__`: nothing is imported, no module hook runs) or among the
objects the caller allows (`offline_callables`). Loading a trace never resolves anything; a name
that resolves neither way is a typed `not_replayable_offline` finding naming the op.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import sys
from typing import Any, Iterable, Iterator, Mapping

import torch

from ..ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op, Trace

# Namespaces a stored call may name (everything a capture records as a torch-level call).
_ALLOWED_PREFIXES = ("torch.Tensor.", "torch.nn.functional.", "torch._C._nn.", "torch._C._VariableFunctions.",
                     "torch.linalg.", "torch.fft.", "torch.special.", "torch._C._linalg.", "torch._C._fft.",
                     "torch._C._special.", "torch.functional.", "torch.ops.aten.", "torch._C.TensorBase.",
                     "torch.nn.init.")
_SYNTHETIC = (INPUT_KIND, OUTPUT_KIND, CONSTANT_KIND)
_FUNCTION_KIND = "autograd_function"  # tracer.capture.boundaries.FUNCTION_KIND (not imported: capture is heavy)
_PYTYPES = {"int": int, "float": float, "bool": bool, "complex": complex}
_PLAIN = frozenset({bool, int, float, str})
# Callables the caller allows an offline replay to call, by the name an op records (Op.func).
_ALLOWED: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("offline_callables", default={})


class NotReplayable(Exception):
    """An op validation cannot call again; `check` names the finding it becomes."""

    def __init__(self, message: str, check: str = "not_replayable_offline") -> None:
        super().__init__(message)
        self.check = check


def has_call_templates(trace: Trace) -> bool:
    """True when some call op of `trace` carries a stored call template."""
    return any("args" in op.attrs for op in trace.ops if op.kind not in _SYNTHETIC)


@contextlib.contextmanager
def offline_callables(*callables: Any) -> Iterator[None]:
    """Allow an offline replay (validate on a loaded trace) to call these `autograd.Function` classes
    or registered custom ops where an op names them, whether or not their module is imported."""
    from ..capture.boundaries import kernel_name

    allowed = dict(_ALLOWED.get())
    for c in callables:
        try:
            allowed[kernel_name(c)] = c
        except TypeError:
            raise TypeError(f"offline_callables takes autograd.Function classes and custom ops, not {c!r}") from None
    token = _ALLOWED.set(allowed)
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def allowed_callables(extra: Iterable[Any] = ()) -> dict[str, Any]:
    """The callables allowed now (`offline_callables`), plus `extra` (objects), by recorded name."""
    from ..capture.boundaries import kernel_name

    return {**_ALLOWED.get(), **{kernel_name(c): c for c in extra}}


def resolve_foreign(op: Op, allowed: Mapping[str, Any]) -> Any:
    """The callable replaying an op the trace could not name under `torch`: an allowed object, or an
    `autograd.Function` class found by qualified name in a module already imported; else `NotReplayable`."""
    name = op.func
    hit = allowed.get(name)
    if hit is None and op.kind == _FUNCTION_KIND:
        hit = _imported_object(name)
    if isinstance(hit, type) and issubclass(hit, torch.autograd.Function):
        return hit.apply
    if hit is not None and op.kind != _FUNCTION_KIND and callable(hit):
        return hit
    module = name.rsplit(".", 1)[0]
    raise NotReplayable(
        f"not replayable offline: {name} is not a torch function, and a trace file names it only; "
        + (f"it is replayed from an autograd.Function class in a module already imported, and {module!r} is not "
           f"(or holds no such class): import it in this process before validating, or allow it with "
           f"`with tracer.offline_callables({name.rsplit('.', 1)[-1]}): tracer.validate(...)`"
           if op.kind == _FUNCTION_KIND else
           f"allow the callable with `with tracer.offline_callables(...): tracer.validate(...)`"))


def _imported_object(name: str) -> Any:
    """The object at dotted `name` inside a module already in `sys.modules`, read through `__dict__` only."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:i]))
        if module is None:
            continue
        obj: Any = module
        for part in parts[i:]:
            obj = vars(obj).get(part) if hasattr(obj, "__dict__") else None
            if obj is None:
                return None
        return obj
    return None


def resolve_callable(path: Any) -> Any:
    """The torch callable a stored dotted path names; raises `NotReplayable` for anything else."""
    if isinstance(path, str) and path.startswith("torch.ops.") and not path.startswith("torch.ops.aten."):
        return _registered_op(path)
    if not isinstance(path, str) or not (path.startswith(_ALLOWED_PREFIXES) or _top_level_builtin(path)):
        raise NotReplayable(f"not replayable offline: the call {path!r} is not a torch function "
                            "(a foreign callable cannot be stored in a trace file)")
    parts = path.split(".")
    obj: Any = torch
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:i + 1]))
            except ImportError:
                raise NotReplayable(f"not replayable offline: {path!r} does not exist in this torch") from None
    if not callable(obj):
        raise NotReplayable(f"not replayable offline: {path!r} is not callable")
    return obj


def _registered_op(path: str) -> Any:
    """`torch.ops.<ns>.<op>.<overload>` when that op is registered in this process (nothing is imported)."""
    parts = path.split(".")
    if len(parts) != 5 or not all(p.isidentifier() for p in parts):
        raise NotReplayable(f"not replayable offline: the call {path!r} is not a torch function")
    try:
        overload = getattr(getattr(getattr(torch.ops, parts[2]), parts[3]), parts[4])
    except (AttributeError, RuntimeError):
        raise NotReplayable(f"not replayable offline: the custom op {path!r} is not registered in this process "
                            "(load the library that defines it before validating)") from None
    if not isinstance(overload, torch._ops.OpOverload):
        raise NotReplayable(f"not replayable offline: {path!r} is not an operator overload")
    return overload


def _top_level_builtin(path: str) -> bool:
    """`torch.<name>` where the name is one of torch's own builtin ops (torch.add, torch.where)."""
    parts = path.split(".")
    if len(parts) != 2 or parts[0] != "torch":
        return False
    obj = getattr(torch, parts[1], None)
    return obj is not None and getattr(torch._C._VariableFunctions, parts[1], None) is obj


class OfflineCalls:
    """Decodes op call templates into `(func, args, kwargs)`, once per call."""

    def __init__(self, trace: Trace, params: Mapping[str, torch.Tensor] | None,
                 callables: Iterable[Any] = ()) -> None:
        self.trace = trace
        self.params = dict(params or {})
        self.allowed = allowed_callables(callables)
        self._aliases = {alias: rec.address for rec in trace.params.values() for alias in rec.tied}
        self._calls: dict[int, tuple] = {}
        self._param_cache: dict[str, torch.Tensor] = {}
        self._funcs: dict[tuple, Any] = {}  # (op kind, op func, stored call) -> the resolved callable

    def call(self, op: Op) -> tuple:
        hit = self._calls.get(op.func_call_id)
        if hit is None:
            hit = self._decode(op)
            self._calls[op.func_call_id] = hit
        return hit

    def _decode(self, op: Op) -> tuple:
        template = op.attrs
        if "args" not in template:
            raise NotReplayable("not replayable offline: the trace file holds no call template for it")
        func = self._func(op, template.get("call"))
        edges = {e.position: e.source for e in op.parents}
        args = tuple(self._value(a, edges) for a in template["args"])
        kwargs = {str(k): self._value(v, edges) for k, v in template["kwargs"].items()}
        return func, args, kwargs

    def _func(self, op: Op, call: Any) -> Any:
        """The callable of a stored call, resolved once per name (a refusal is not kept: it raises each time)."""
        if call is not None and not isinstance(call, str):
            return resolve_callable(call)  # refused
        key = (op.kind, op.func, call)
        hit = self._funcs.get(key)
        if hit is None:
            hit = self._funcs[key] = resolve_foreign(op, self.allowed) if call is None else resolve_callable(call)
        return hit

    def _value(self, a: Any, edges: Mapping[str, str]) -> Any:
        if type(a) in _PLAIN or a is None or isinstance(a, (bool, int, float, str)):
            return a
        if isinstance(a, list):
            return [self._value(b, edges) for b in a]
        if isinstance(a, dict) and "before" in a:  # a buffer's value before this op wrote it
            if a.get("value") is None:
                raise NotReplayable(f"not replayable offline: the value of buffer {a['before']!r} before this "
                                    "write was too large to store in the template")
            return tensor_from_value(a["value"])
        if isinstance(a, dict) and "tensor" in a and len(a) == 2 and "value" in a:  # a small tensor kept by value
            return tensor_from_value(a["value"])
        if not isinstance(a, dict) or len(a) != 1:
            raise NotReplayable(f"not replayable offline: malformed template value {a!r}")
        (tag, v), = a.items()
        if tag == "edge":
            source = edges.get(v)
            if source is None or source not in self.trace.values:
                raise NotReplayable(f"not replayable offline: the parent at argument {v} was not saved")
            return self.trace.values[source]
        if tag == "param":
            return self._param(str(v))
        if tag == "tensor":
            raise NotReplayable(f"not replayable offline: argument {v} is a tensor the trace does not know")
        if tag == "opaque":
            raise NotReplayable(f"not replayable offline: an argument is a {v} object, which a trace file "
                                "cannot store")
        return _decode_atom(tag, v, lambda b: self._value(b, edges))

    def _param(self, address: str) -> torch.Tensor:
        hit = self._param_cache.get(address)
        if hit is not None:
            return hit
        canonical = self._aliases.get(address, address)
        rec = self.trace.params.get(canonical)
        names = [address, canonical, *(rec.tied if rec is not None else ())]
        found = next((self.params[n] for n in names if n in self.params), None)
        if found is None:
            raise NotReplayable(f"not replayable offline: parameter {address!r} was not supplied "
                                "(validate(trace, params=model))")
        t = found.detach()
        # kernels choose their algorithm by requires_grad, as in the capture; a parameter made under
        # torch.inference_mode cannot require grad outside it, and the forward that read it ran without
        # autograd recording (inference mode or no_grad), as replay runs
        if rec is not None and rec.requires_grad and (t.is_floating_point() or t.is_complex()) \
                and not t.is_inference():
            t = t.requires_grad_(True)
        self._param_cache[address] = t
        return t


def _decode_atom(tag: str, v: Any, value: Any) -> Any:
    if tag == "tuple":
        return tuple(value(b) for b in v)
    if tag == "size":
        return torch.Size(int(x) for x in v)
    if tag == "slice":
        return _slice(v, value)
    if tag == "ellipsis":
        return Ellipsis
    if tag == "float":
        return float(v)
    if tag == "complex":
        return complex(v[0], v[1])
    if tag == "dtype":
        return _torch_attr(v, torch.dtype)
    if tag == "layout":
        return _torch_attr(v, torch.layout)
    if tag == "memory_format":
        return _torch_attr(v, torch.memory_format)
    if tag == "pytype":
        if v not in _PYTYPES:
            raise NotReplayable(f"not replayable offline: {v!r} is not a Python number type")
        return _PYTYPES[v]
    if tag == "device":
        return torch.device(str(v))
    if tag == "dict":
        return {str(k): value(b) for k, b in v.items()}
    raise NotReplayable(f"not replayable offline: unknown template tag {tag!r}")


def _slice(v: Any, value: Any) -> slice:
    """A stored slice, checked: three bounds, each None, an int or a stored integer tensor (fail-closed)."""
    if not isinstance(v, list) or len(v) != 3:
        raise NotReplayable(f"not replayable offline: malformed slice {v!r}")
    parts = [b if b is None or type(b) is int else value(b) if isinstance(b, dict) and "value" in b else _BAD
             for b in v]
    if any(p is _BAD or not (p is None or type(p) is int or (isinstance(p, torch.Tensor) and not p.is_floating_point()
                                                             and p.numel() == 1)) for p in parts):
        raise NotReplayable(f"not replayable offline: malformed slice {v!r}")
    return slice(*parts)


_BAD = object()


def _torch_attr(name: Any, kind: type) -> Any:
    obj = getattr(torch, str(name), None)
    if not isinstance(obj, kind):
        raise NotReplayable(f"not replayable offline: {name!r} is not a torch {kind.__name__}")
    return obj


def tensor_from_value(v: Any) -> torch.Tensor:
    """A tensor from `call_template.tensor_value` data."""
    if not isinstance(v, dict):
        raise NotReplayable("not replayable offline: a stored tensor value is missing")
    try:
        dtype = _torch_attr(v["dtype"], torch.dtype)
        data = [float(x) if isinstance(x, str) else x for x in v["data"]]
        return torch.tensor(data, dtype=dtype).reshape([int(s) for s in v["shape"]])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise NotReplayable(f"not replayable offline: a stored tensor value is malformed ({exc})") from None


__all__ = ["NotReplayable", "OfflineCalls", "allowed_callables", "has_call_templates", "offline_callables",
           "resolve_callable", "resolve_foreign", "tensor_from_value"]
