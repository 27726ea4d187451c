"""Constants of a structure-only capture: values fixed by the forward's own code, not by weights or inputs.

`torch.tensor(4)` in model code holds nothing hidden: its value is in the source. Such a real
tensor (and what is computed from constants alone) is admitted and recorded. A meta tensor made
from shapes and Python numbers (`torch.ones(shape, device=x.device)`, `torch.arange(n)`, and ops
on such tensors) carries a *known value*: a small real CPU copy computed alongside, from which a
later value read (`if mask.all():`) is answered and disclosed. Known values are bounded
(`MAX_KNOWN_NUMEL` live elements in all); past the bound a tensor has none and a read refuses.
A real tensor that carries data from outside the forward still refuses (see `StructureOnlyGuard`).
"""
from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import Tensor

from ..capture.hotpath import scan_constants as _SCAN_CONSTANTS  # None without the C extension

FROM_PYTHON_DATA = frozenset({"torch.tensor", "torch.as_tensor", "torch.scalar_tensor"})
MAX_KNOWN_NUMEL = 4_000_000  # live elements of real constants and known values together, per capture
MAX_RECORDED_READS = 200  # resolved reads recorded one by one; beyond, only counted
# Tensor types whose `is_meta` answers as `device.type == "meta"` does (a subclass may override `device`)
PLAIN_TENSORS = (Tensor, torch.nn.Parameter)
_SEQ = (list, tuple)


def meta_like(t: Tensor) -> Tensor:
    """A meta tensor of `t`'s shape, strides and dtype (a stand-in that holds no values)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def is_python_call(args: tuple, kwargs: dict) -> bool:
    """True when every argument is Python data or a dtype, device, size or name: no tensor, no foreign array."""
    return all(is_plain(a) for a in args) and all(is_plain(a) for a in kwargs.values())


def is_plain(value: Any, depth: int = 0) -> bool:
    """True for Python data or a dtype, device, layout or memory format (lists and tuples looked into)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, torch.dtype, torch.device,
                                           torch.layout, torch.memory_format)):
        return True
    if isinstance(value, (list, tuple)) and depth < 4:  # torch.Size is a tuple
        return all(is_plain(v, depth + 1) for v in value)
    return False


def is_python_data(value: Any, depth: int = 0) -> bool:
    """True for a Python number or bool, or a (nested) list/tuple of them."""
    if isinstance(value, (bool, int, float, complex)):
        return True
    if isinstance(value, (list, tuple)) and depth < 4:
        return all(is_python_data(v, depth + 1) for v in value)
    return False


class ConstantLedger:
    """The constants admitted during one capture and the known values of meta tensors, by identity."""

    def __init__(self, budget: int = MAX_KNOWN_NUMEL) -> None:
        self._live: dict[int, weakref.ref] = {}  # real constants made in the forward
        self._origin: dict[int, int] = {}  # id -> index of its record
        self._storages: dict[int, Any] = {}  # their storages, by data pointer (held: no pointer is reused)
        # id -> (weak ref to the tensor, its known value or None for a real constant that is its own
        # value, storage key of the value, numel charged)
        self._known: dict[int, tuple[weakref.ref, Tensor | None, int, int]] = {}
        self.budget = budget
        self.used = 0
        self.dropped = 0  # known values not kept because the bound was reached
        self._given: dict[int, str] = {}  # id in `_known` -> where its value was given from ("inputs", "buffers")
        self.records: list[dict[str, Any]] = []
        self.reads: list[dict[str, Any]] = []
        self.read_count = 0

    # -- real constants -----------------------------------------------------------------------
    def holds(self, t: Tensor) -> bool:
        """True when `t` is a constant admitted earlier in this capture, or shares its storage (an
        `nn.Parameter` wrapped around it by a module built inside the forward)."""
        ref = self._live.get(id(t))
        if ref is not None and ref() is t:
            return True
        return bool(self._storages) and _storage_key(t) in self._storages

    def makes_constant(self, qualname: str, args: tuple, kwargs: dict, real_args: list[Tensor],
                       factory: bool = False) -> bool:
        """A call from Python data (`torch.tensor(4)`, `torch.arange(n)`), or one whose real tensor arguments
        are all constants."""
        if qualname in FROM_PYTHON_DATA:
            return bool(args) and is_python_data(args[0]) and not real_args
        if factory:
            return not real_args
        return bool(real_args) and all(self.holds(t) for t in real_args)

    def admit(self, t: Tensor, qualname: str, site: str | None, values: str = "constant") -> bool:
        """Record the real tensor `t` made in the forward while the bound allows; False (not admitted) otherwise.

        `values` says what its values are: "constant" (fixed by the code: reads are answered from it),
        "uninitialized" (`torch.empty`) or "random" (`torch.randn`): then no read is answered from it.
        """
        if not self.holds(t):
            n = t.numel()
            if self.used + n > self.budget:
                return False
            self._live[id(t)] = weakref.ref(t, self._release_live(id(t)))
            self.used += n  # charged until the capture ends: the storage is held (see `holds`)
            if n:
                self._storages[_storage_key(t)] = t.untyped_storage()
            self._origin[id(t)] = len(self.records)
            self.records.append({"call": qualname, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                                 "device": str(t.device), "values": values, "site": site})
        if values == "constant":
            if self.value_of(t) is None:
                self._known[id(t)] = (weakref.ref(t), None, _storage_key(t), 0)
        else:  # written in place by a call whose result is not known
            self.forget_aliases(t)
        return True

    def made_by(self, t: Tensor) -> dict[str, Any] | None:
        """The record of the call that made the admitted constant `t`."""
        i = self._origin.get(id(t)) if self.holds(t) else None
        return self.records[i] if i is not None else None

    def _release_live(self, key: int):
        def release(ref: weakref.ref) -> None:
            if self._live.get(key) is ref:
                del self._live[key]
                self._known.pop(key, None)
                self._origin.pop(key, None)
        return release

    # -- known values -------------------------------------------------------------------------
    def scan(self, args: tuple, kwargs: dict) -> tuple[list[Tensor], int, bool, bool]:
        """In one pass over a call's arguments (top level, and inside a list/tuple): the tensors not on
        meta, the number of tensors, whether the first meta tensor has a known value (a call's value is
        known only when every tensor it reads has one), and whether every argument is Python data (`is_plain`).
        In C where the capture's hot path is built (`tracer.capture.hotpath`), the same pass."""
        if _SCAN_CONSTANTS is not None:
            return _SCAN_CONSTANTS(args, kwargs, *self.scan_spec())
        reals: list[Tensor] = []
        n = 0
        first = None  # the first meta tensor
        python_only = True
        for a in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(a, Tensor):
                inner = (a,)
            elif type(a) in _SEQ:  # one level of list/tuple nesting is looked into
                inner = a
            else:
                if python_only and not is_plain(a):
                    python_only = False
                continue
            for b in inner:
                if isinstance(b, Tensor):
                    n += 1
                    python_only = False
                    if not (b.is_meta if type(b) in PLAIN_TENSORS else b.device.type == "meta"):
                        reals.append(b)
                    elif first is None:
                        first = b
            if python_only and not is_plain(a):
                python_only = False
        hit = self._known.get(id(first)) if first is not None else None  # as `value_of(first) is not None`
        return reals, n, hit is not None and hit[0]() is first, python_only

    def scan_spec(self) -> tuple:
        """What the C scan reads: the known values (id -> (weak reference, ...)), the plain tensor types, `is_plain`."""
        return self._known, PLAIN_TENSORS, is_plain

    def value_of(self, t: Tensor) -> Tensor | None:
        """The known value of `t` (a CPU tensor), or None when its value depends on weights or inputs."""
        hit = self._known.get(id(t))
        if hit is None or hit[0]() is not t:
            return None
        return t if hit[1] is None else hit[1]

    def remember(self, t: Tensor, value: Tensor, given: str | None = None) -> bool:
        """Keep `value` as the known value of the meta tensor `t` while the bound allows; `given`: the value is
        (computed from) values the caller gave ("inputs", "buffers"), not fixed by the forward's code."""
        old = self._known.get(id(t))
        if old is not None and old[0]() is t:
            if old[1] is value:
                return True
            self._forget(id(t))
        n = value.numel()
        if self.used + n > self.budget:
            self.dropped += 1
            return False
        key = id(t)
        ref = weakref.ref(t, self._release_known(key))
        self._known[key] = (ref, value, _storage_key(value), n)
        self.used += n
        if given:
            self._given[key] = given
        return True

    def given_basis(self, args: tuple, kwargs: dict) -> str | None:
        """Where the first given known value among these arguments (top level, or in a list/tuple) came from
        ("inputs", "buffers"), or None when every known value among them is the forward's own."""
        if not self._given:
            return None
        for a in (*args, *kwargs.values()):
            for b in (a if type(a) in _SEQ else (a,)):
                for c in ((b.start, b.stop, b.step) if type(b) is slice else (b,)):  # x[..., a:b] by tensors
                    if isinstance(c, Tensor) and id(c) in self._given and self.value_of(c) is not None:
                        return self._given[id(c)]
        return None

    def _release_known(self, key: int):
        def release(ref: weakref.ref) -> None:
            hit = self._known.get(key)
            if hit is not None and hit[0] is ref:
                self._forget(key)
        return release

    def _forget(self, key: int) -> None:
        self._given.pop(key, None)
        hit = self._known.pop(key, None)
        if hit is not None:
            self.used -= hit[3]

    def forget_aliases(self, t: Tensor) -> None:
        """`t` is written by a call whose result is not known: drop the known value of `t`, its base and every
        tensor whose known value shares their storage."""
        keys = set()
        for x in (t, getattr(t, "_base", None)):
            if x is None:
                continue
            hit = self._known.get(id(x))
            if hit is not None and hit[0]() is x:
                keys.add(hit[2])
        if not keys:
            return
        for key in [k for k, hit in self._known.items() if hit[2] in keys]:
            self._forget(key)  # a real constant stays admitted; its value is no longer known

    # -- disclosure -----------------------------------------------------------------------------
    def record_read(self, call: str, site: str | None, module: str, answer: Any, basis: str = "constants") -> None:
        """Disclose one value read answered without weights: which call, where, and what it answered."""
        self.read_count += 1
        if len(self.reads) < MAX_RECORDED_READS:
            self.reads.append({"call": call, "site": site, "module": module, "answer": answer, "basis": basis})


def _storage_key(t: Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr() or id(t)
    except (RuntimeError, NotImplementedError):
        return id(t)
