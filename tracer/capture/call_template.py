"""The call template of an op (`Op.attrs`): its callable and non-tensor arguments as JSON data.

Shape: `{"call": "torch.nn.functional.gelu" | None, "args": [...], "kwargs": {...}}`. Plain JSON
values stand for themselves (a non-finite float is `{"float": "inf"}`); every other argument is a
one-key object: `{"edge": "<position>"}` a parent's tensor (see `Op.parents`), `{"param": "<address>"}`
a parameter or buffer, `{"before": "<address>", "value": <small tensor> | None}` a buffer's value
before the in-place write this op made, `{"tensor": "<position>"}` a tensor the trace does not know
(with `"value": <small tensor>` when it holds at most `INLINE_NUMEL` elements: a size or an index
tensor inside a tuple, read when the trace is built), `{"pytype": "int"}` a Python number type,
`{"tuple": [...]}`, `{"size": [...]}`, `{"slice": [start, stop, step]}` (each None, an int, or a small
integer tensor by value: `{"tensor": null, "value": ...}`), `{"ellipsis": None}`,
`{"dtype": "float32"}`, `{"device": "cpu"}`, `{"layout": "strided"}`, `{"memory_format": "..."}`,
`{"complex": [re, im]}`, `{"dict": {...}}`, and `{"opaque": "<type>"}` for an object no file can hold.
A small tensor value is `{"dtype": ..., "shape": [...], "data": [...]}`. Encoding is deferred until
the template is first read, so capture pays nothing for it.
"""
from __future__ import annotations

import math
import os
from typing import Any, Container, Iterator, Mapping

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .kernel import native  # the C kernel's entry points (None: the Python kernel)
from .kernel.contract import TEMPLATE_FIELDS

_Tensor = torch.Tensor
# A buffer's pre-write value is stored inline up to this many elements.
INLINE_NUMEL = 64


# Stands in for a tensor argument in a call kept without its tensors, compared by identity. A bytes
# object, so that tuples of arguments holding it are not tracked by the garbage collector.
TENSOR = bytes([0]) + b"tensor"
_SEQ = (list, tuple)
_PLAIN = frozenset({int, str, bool, type(None)})  # JSON as they are (floats may be non-finite)
_POS = tuple(str(i) for i in range(16))


def scrub_deep(args: tuple) -> tuple:
    """`args` with tensors inside lists and tuples replaced too (calls such as `cat`)."""
    return tuple([_scrub(a) for a in args])


def scrub_kwargs(kwargs: dict) -> dict:
    return {k: (TENSOR if isinstance(v, _Tensor) else v) for k, v in kwargs.items()}


def _scrub(a: Any) -> Any:
    if isinstance(a, _Tensor):
        return TENSOR
    if type(a) in _SEQ:
        return type(a)(_scrub(b) for b in a)
    return a


class _Inline:
    """A small tensor argument that may be no edge and no parameter: its value, encoded when the trace is built."""

    __slots__ = ("value",)

    def __init__(self, t: torch.Tensor) -> None:
        self.value = tensor_value(t)


class _Before:
    """A buffer's value before an in-place write, encoded when the trace is built."""

    __slots__ = ("address", "value")

    def __init__(self, address: str, t: torch.Tensor) -> None:
        self.address = address
        self.value = tensor_value(t)


def _detach_call(source: tuple, snapshots: Mapping[int, str], edges: Container[str] = ()) -> tuple:
    """A live call without its tensors, so a template never keeps one alive (pre-write copies and small
    tensors that are not on an edge encoded; kwargs None when there are none). `edges`: the argument positions
    of the call's parents."""
    func, args, kwargs = source
    return (func, tuple([a if type(a) in _ATOMS else _detach(a, snapshots, edges, _POS[i] if i < 16 else str(i))
                         for i, a in enumerate(args)]),
            {k: _detach(v, snapshots, edges, k) for k, v in kwargs.items()} if kwargs else None)


_ATOMS = _PLAIN | {float}  # arguments `_detach` returns as they are


def _detach(a: Any, snapshots: Mapping[int, str], edges: Container[str], position: str) -> Any:
    if isinstance(a, _Tensor):
        addr = snapshots.get(id(a))
        if addr is not None:
            return _Before(addr, a)
        return TENSOR if position in edges or a.numel() > INLINE_NUMEL else _Inline(a)
    if type(a) in _SEQ:
        return type(a)(_detach(b, snapshots, edges, f"{position}.{j}") for j, b in enumerate(a))
    return a


_new = object.__new__


class CallTemplate(Mapping):
    """`Op.attrs` of a call op: encoded from the recorded call the first time it is read."""

    __slots__ = ("_func", "_args", "_kwargs", "_parents", "_params", "_encoded")
    # Made only by `call_templates`, which sets the slots itself (no __init__ frame for 100,000s of them);
    # `_kwargs` is None for a call without keyword arguments.

    def _data(self) -> dict[str, Any]:
        if self._encoded is None:
            func, args, kwargs = self._func, self._args, self._kwargs
            enc = _Encoder([pos for _p, pos in self._parents], self._params)
            value = enc.value
            self._encoded = {"call": callable_path(func),
                             "args": [a if type(a) in _PLAIN else value(a, _POS[i] if i < 16 else str(i))
                                      for i, a in enumerate(args)],
                             "kwargs": {k: v if type(v) in _PLAIN else value(v, k) for k, v in kwargs.items()}
                             if kwargs else {}}
            self._func = self._args = self._kwargs = self._parents = self._params = None
        return self._encoded

    def __getitem__(self, key: str) -> Any:
        return (self._encoded or self._data())[key]

    def keys(self) -> Any:  # the views of the encoded dict: dict(template) copies at C speed
        return self._data().keys()

    def items(self) -> Any:
        return self._data().items()

    def values(self) -> Any:
        return self._data().values()

    def get(self, key: str, default: Any = None) -> Any:
        return self._data().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data()

    def __eq__(self, other: object) -> bool:
        return self._data() == (dict(other) if isinstance(other, Mapping) else other)

    __hash__ = None  # type: ignore[assignment]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __repr__(self) -> str:
        return repr(self._data())


def call_templates(records: list, fields: tuple, snapshots: Mapping[int, str]) -> list[Mapping[str, Any]]:
    """One template per raw record ({} for synthetic ops); the records of one call share theirs.

    `fields` names the record slots (info, live call, scrubbed args, scrubbed kwargs, parents, params,
    call id). A live call (values saved) is copied without its tensors first: the trace's live calls
    may later drop references (offloaded weights) that a template must not keep alive.
    """
    if _C_TEMPLATES is not None and fields == _C_FIELDS:  # the same loop in C (native.py)
        return _C_TEMPLATES(records, snapshots, _detach_parts)
    f_info, f_live, f_args, f_kwargs, f_parents, f_params, f_call = fields
    out: list[Mapping[str, Any]] = []
    last_call = -1
    last: Mapping[str, Any] = {}
    for rec in records:
        live = rec[f_live]
        if live is None and rec[f_args] is None:
            out.append({})
        elif rec[f_call] == last_call:  # the next output of the same multi-output call
            out.append(last)
        else:
            if live is not None:
                func, args, kwargs = _detach_parts(live, snapshots, rec[f_parents])
            else:
                func, args, kwargs = rec[f_info].func, rec[f_args], rec[f_kwargs] or None
            last = _new(CallTemplate)
            last._func, last._args, last._kwargs, last._parents, last._params = \
                func, args, kwargs, rec[f_parents], rec[f_params]
            last._encoded = None
            last_call = rec[f_call]
            out.append(last)
    return out


def _detach_parts(live: tuple, snapshots: Mapping[int, str], parents: tuple) -> tuple:
    """A saved live call's template parts (the C loop's callback)."""
    return _detach_call(live, snapshots, [pos for _p, pos in parents])


def _configure_c_templates() -> Any:
    """`native.call_templates` set up for CallTemplate, or None (not built)."""
    if native.call_templates is None or native.configure_templates is None:
        return None
    native.configure_templates(CallTemplate, tuple(CallTemplate.__dict__[name] for name in CallTemplate.__slots__),
                                TENSOR, _Tensor)
    return native.call_templates


_C_TEMPLATES = _configure_c_templates()
# The record fields the C loop reads (positions from the contract, which the C reads too).
_C_FIELDS = TEMPLATE_FIELDS


class _Encoder:
    """Encodes arguments in the order capture visited them: a tensor not on an edge is the next
    parameter or buffer the call read (capture records them in that same order)."""

    def __init__(self, positions: list[str], params: tuple) -> None:
        self.positions = positions
        self.params = list(params) if params else params

    def tensor(self, position: str | None, before: _Before | None, inline: _Inline | None = None) -> dict[str, Any]:
        if position is not None and position in self.positions:
            return {"edge": position}
        if position is None or not self.params:
            if inline is not None and inline.value is not None:
                return {"tensor": position, "value": inline.value}
            return {"tensor": position}
        addr = self.params.pop(0)
        if before is not None:
            return {"before": before.address, "value": before.value}
        return {"param": addr}

    def value(self, a: Any, position: str | None) -> Any:
        if a is TENSOR or isinstance(a, _Before):
            return self.tensor(position, a if isinstance(a, _Before) else None)
        if isinstance(a, _Inline):
            return self.tensor(position, None, a)
        if isinstance(a, _Tensor):  # inside a container capture did not walk: not an edge
            return {"tensor": None}
        if a is None or isinstance(a, (bool, int, str)):
            return a
        if isinstance(a, float):
            return a if math.isfinite(a) else {"float": repr(a)}
        if isinstance(a, torch.Size):
            return {"size": list(a)}
        if type(a) in _SEQ:
            nested = position is not None and "." not in position and position.isdigit() and bool(a) \
                and (isinstance(a[0], (_Tensor, _Inline, _Before)) or a[0] is TENSOR)  # walked as capture did
            items = [self.value(b, f"{position}.{j}" if nested else None) for j, b in enumerate(a)]
            return items if type(a) is list else {"tuple": items}
        return _atom(a)


def _atom(a: Any) -> Any:
    """A non-container, non-tensor argument."""
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).replace("torch.", "")}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    if isinstance(a, torch.layout):
        return {"layout": str(a).replace("torch.", "")}
    if isinstance(a, torch.memory_format):
        return {"memory_format": str(a).replace("torch.", "")}
    if isinstance(a, slice):
        parts = [_slice_part(p) for p in (a.start, a.stop, a.step)]
        if all(p is not _UNSTORABLE for p in parts):
            return {"slice": parts}
    if a is int or a is float or a is bool or a is complex:  # a Python type standing for a dtype
        return {"pytype": a.__name__}
    if a is Ellipsis:
        return {"ellipsis": None}
    if isinstance(a, complex):
        return {"complex": [a.real, a.imag]}
    if isinstance(a, dict) and all(isinstance(k, str) for k in a):
        return {"dict": {k: _Encoder([], ()).value(v, None) for k, v in a.items()}}
    if type(a).__module__ == "numpy" and hasattr(a, "item") and getattr(a, "ndim", None) == 0:
        item = a.item()  # a numpy scalar (np.int64(3)): torch reads it as the Python number
        if type(item) in (int, float, bool):
            return _Encoder([], ()).value(item, None)
    return {"opaque": f"{type(a).__module__}.{type(a).__qualname__}"}


_UNSTORABLE = object()


def _slice_part(p: Any) -> Any:
    """A slice bound as JSON: None, an int (anything with `__index__`), or a small integer tensor by
    value (`x[:, :n]` with `n = torch.IntTensor([32])`, as VITS slices); else `_UNSTORABLE`."""
    if p is None or (isinstance(p, int) and not isinstance(p, bool)):
        return p
    if isinstance(p, _Tensor):
        if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
            return _UNSTORABLE
        value = tensor_value(p)
        return {"tensor": None, "value": value} if value is not None else _UNSTORABLE
    index = getattr(type(p), "__index__", None)
    if index is not None and not isinstance(p, bool):
        try:
            return int(index(p))
        except Exception:
            return _UNSTORABLE
    return _UNSTORABLE


# Dtypes whose elements `tolist` reads as JSON numbers (not complex, bfloat16, quantized, unsigned wide).
_INLINE_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                            torch.float16, torch.float32, torch.float64,
                            *(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))})


def tensor_value(t: torch.Tensor) -> dict[str, Any] | None:
    """A small tensor's value as JSON (None above `INLINE_NUMEL` elements, for odd dtypes and for layouts
    other than dense: sparse COO/CSR/CSC/BSR/BSC, nested, quantized, mkldnn)."""
    if t.layout is not torch.strided or t.dtype not in _INLINE_DTYPES or t.is_nested or t.device.type == "meta":
        return None
    if t.numel() > INLINE_NUMEL:
        return None
    if is_traceable_wrapper_subclass(t) or _storage_freed(t):
        return None  # a DTensor (or another wrapper subclass), or storage freed since (FSDP's resharded parameters)
    flat = t.detach().cpu().reshape(-1)
    data = [v if not isinstance(v, float) or math.isfinite(v) else repr(v) for v in flat.tolist()]
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "data": data}


def _storage_freed(t: torch.Tensor) -> bool:
    """True when `t` has elements but its storage holds no bytes any more (resized to 0 after the call)."""
    try:
        return bool(t.numel()) and not t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested and other storage-less tensors
        return False


# -- the callable ------------------------------------------------------------------------
_path_cache: dict[Any, str | None] = {}


def callable_path(func: Any) -> str | None:
    """The dotted path under `torch` that names `func` again in another process, or None."""
    try:
        return _path_cache[func]
    except KeyError:
        pass
    except TypeError:
        return None
    from ..replay.offline import resolve_callable  # the resolver is the test of a path

    path = None
    # a torch wrapper (Tensor.__pow__ wraps TensorBase.pow) is named by the kernel it wraps
    targets = [func, func.__wrapped__] if _torch_wrapper(func) else [func]
    for target in targets:
        for candidate in _candidates(target):
            try:
                if _same_callable(resolve_callable(candidate), target):
                    path = candidate
                    break
            except Exception:
                continue
        if path is not None:
            break
    _path_cache[func] = path
    return path


_TORCH_DIR = os.path.join(os.path.dirname(torch.__file__), "")


def _torch_wrapper(func: Any) -> bool:
    """True for a function defined in torch's own source that wraps another (`functools.wraps`)."""
    code = getattr(func, "__code__", None)
    return getattr(func, "__wrapped__", None) is not None and code is not None and \
        code.co_filename.startswith(_TORCH_DIR)


def _candidates(func: Any) -> Iterator[str]:
    if isinstance(func, torch._ops.OpOverload):
        ns, _, name = func.name().partition("::")
        base, _, overload = name.partition(".")
        yield f"torch.ops.{ns}.{base}.{overload or 'default'}"
        return
    name = getattr(func, "__name__", None)
    if name in ("__get__", "__set__"):  # a Tensor property's getter, e.g. Tensor.T.__get__
        prop = getattr(getattr(func, "__self__", None), "__name__", None)
        if prop:
            yield f"torch.Tensor.{prop}.{name}"
        return
    if name is None:
        return
    if getattr(func, "__objclass__", None) is not None or (getattr(func, "__qualname__", "") or "").startswith(
            ("Tensor.", "TensorBase.", "_TensorBase.")):
        yield f"torch.Tensor.{name}"
    module = getattr(func, "__module__", None)
    qual = getattr(func, "__qualname__", None) or name
    if module:
        yield f"{module}.{qual}"
        if qual != name:  # a function made by a factory (torch.functional's boolean_dispatch: qualname "...<locals>.fn")
            yield f"{module}.{name}"
    for ns in ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "torch._C._nn",
               "torch._C._VariableFunctions", "torch._C._linalg", "torch._C._fft", "torch._C._special"):
        yield f"{ns}.{name}"


def _same_callable(found: Any, func: Any) -> bool:
    if found is func:
        return True
    try:
        return bool(found == func)
    except Exception:
        return False
