"""`torch.compile` under capture: the eager graph of the original module, disclosed as such.

A compiled region cannot be recorded op by op (dynamo traces the frame itself, with the capture's
function mode on its stack, and hands back what its cache and graph breaks make of it). So a capture
never lets dynamo run: an `OptimizedModule` passed to `trace` is traced through its `_orig_mod`, and
for the forward dynamo's stance reads `force_eager` in the capturing thread (other threads keep the
stance they had; dynamo is loaded for this at the first capture), so a function or submodule compiled inside the forward runs its Python eagerly and
every call is recorded. Each compiled region that ran eagerly is counted and disclosed; what is
recorded never depends on what dynamo compiled or cached earlier in the process.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Iterator

from torch import nn

_get_ident = threading.get_ident


def is_compiled(module: Any) -> bool:
    """Whether `module` is a `torch.compile` wrapper (dynamo's OptimizedModule)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    cls = getattr(eval_frame, "OptimizedModule", None) if eval_frame is not None else None
    return cls is not None and isinstance(module, cls)


def unwrap(model: nn.Module) -> tuple[nn.Module, dict[str, Any] | None]:
    """The original module of a compiled model (through nested wrappers), with what was unwrapped; else (model, None)."""
    if not is_compiled(model):
        return model, None
    layers = 0
    while is_compiled(model):
        model = model._orig_mod
        layers += 1
    return model, {"unwrapped": layers, "original_class": type(model).__name__}


def compiled_submodules(modules: list[tuple[str, nn.Module]]) -> list[str]:
    """Addresses of compiled wrappers inside the model (each runs its original module eagerly under capture)."""
    if "torch._dynamo" not in sys.modules:
        return []
    return [name for name, m in modules if is_compiled(m)]


def _entering_compiled_region(frame: Any) -> bool:
    """Whether a read of the stance's `skip_guard_eval_unsafe` is a compiled region's entry (dynamo's
    `compile_wrapper` reads it there and nowhere on a `torch._dynamo.disable` path), not the compile a
    higher-order op (`torch.cond`, flex attention) makes of itself (torch marks those in `_hop_compile_tls`)."""
    if frame is None or frame.f_code.co_name != "compile_wrapper":
        return False
    utils = sys.modules.get("torch._higher_order_ops.utils")  # cond, map, flex attention compile themselves
    return not getattr(getattr(utils, "_hop_compile_tls", None), "in_hop_compile", False)


class _EagerStance:
    """Dynamo's stance object while a capture runs: `force_eager` in the capturing thread, the prior stance
    everywhere else. `stance` is read at every `torch._dynamo.disable` wrapper (several times per op on meta),
    so it does one comparison; compiled regions are counted where only their entry reads (`skip_guard_eval_unsafe`)."""

    __slots__ = ("_prior", "_threads", "entries")

    def __init__(self, prior: Any) -> None:
        self._prior = prior
        self._threads: dict[int, int] = {}  # thread id -> captures running in it (a capture may nest)
        self.entries: dict[int, int] = {}  # thread id -> compiled regions entered

    @property
    def stance(self) -> str:
        return "force_eager" if _get_ident() in self._threads else self._prior.stance

    @property
    def skip_guard_eval_unsafe(self) -> bool:
        me = _get_ident()
        if me not in self._threads:
            return self._prior.skip_guard_eval_unsafe
        if _entering_compiled_region(sys._getframe(2)):
            self.entries[me] = self.entries.get(me, 0) + 1
        return False

    @property
    def backend(self) -> Any:
        return None if _get_ident() in self._threads else self._prior.backend

    def join(self) -> int:
        """This thread captures under the stance; returns its count of compiled regions so far."""
        me = _get_ident()
        self._threads[me] = self._threads.get(me, 0) + 1
        return self.entries.get(me, 0)

    def leave(self) -> bool:
        """This thread's capture ended; True when no capture runs under the stance any more."""
        me = _get_ident()
        left = self._threads[me] - 1
        if left:
            self._threads[me] = left
        else:
            del self._threads[me]
            self.entries.pop(me, None)
        return not self._threads


def _eval_frame() -> Any:
    """dynamo's eval_frame, imported once per process when not yet loaded: a higher-order op (`torch.cond`)
    loads dynamo in the middle of a forward, and the stance must be in place before, whatever ran earlier."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is None:
        try:
            import torch._dynamo.eval_frame as eval_frame
        except Exception:  # a build without dynamo
            return None
    return eval_frame


@contextlib.contextmanager
def eager_regions() -> Iterator[EagerRegions | None]:
    """Compiled regions run eagerly in this thread for the block (and are counted); None without dynamo."""
    eval_frame = _eval_frame()
    set_stance = getattr(eval_frame, "_set_stance", None) if eval_frame is not None else None
    if set_stance is None:  # a torch without dynamo's stance: nothing can be compiled eagerly
        yield None
        return
    with _LOCK:
        current = eval_frame._stance
        if not isinstance(current, _EagerStance):  # else a capture runs (here or in another thread): join it
            current = _EagerStance(current)
            try:
                set_stance(current)
            except RuntimeError:  # called inside a compiled region: dynamo refuses a stance change there
                current = None
        regions = EagerRegions(current, current.join()) if current is not None else None
    if regions is None:
        yield None
        return
    try:
        yield regions
    finally:
        with _LOCK:
            regions.close()
            if current.leave() and eval_frame._stance is current:
                eval_frame._stance = current._prior  # as `_set_stance(prior)`, without its in-region check


class EagerRegions:
    """One capture's view of the stance: how many compiled regions its thread entered while it ran."""

    def __init__(self, stance: _EagerStance, start: int) -> None:
        self._stance, self._start, self.entries = stance, start, 0

    def close(self) -> None:
        self.entries = self._stance.entries.get(_get_ident(), 0) - self._start


_LOCK = threading.Lock()


def disclose(findings: Any, unwrapped: dict[str, Any] | None, submodules: list[str],
             stance: EagerRegions | None) -> None:
    """Provenance `compiled` and a warning when the capture ran any compiled region eagerly."""
    entries = stance.entries if stance is not None else 0
    if unwrapped is None and not submodules and not entries:
        return
    record: dict[str, Any] = {"traced": "eager", "compiled_regions_ran": bool(entries)}
    if unwrapped is not None:
        record.update(unwrapped)
    if submodules:
        record["compiled_submodules"] = submodules[:20]
    findings.add(compiled=record)
    what = ("the model is a torch.compile wrapper; its original module was traced"
            if unwrapped is not None else "compiled code ran in the forward")
    findings.warn(f"{what}: every compiled region ran eagerly under capture, so the trace "
                  "is the eager graph of the original code, not the graph the compiler would run (fusions, "
                  "graph breaks and compiled kernels are not in it)")
