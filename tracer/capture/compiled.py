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


def _compiling_callback(frame: Any) -> bool:
    """Whether the stance is read to enter a compiled region (dynamo's `_callback_from_stance` asked with a real
    callback), not a `torch._dynamo.disable` wrapper around one of torch's own functions (callback None/False)."""
    if frame is None or frame.f_code.co_name != "_callback_from_stance":
        return False
    callback = frame.f_locals.get("callback")
    return callback is not None and callback is not False


class _EagerStance:
    """Dynamo's stance object while a capture runs: `force_eager` in the capturing thread, its reads counted
    (dynamo reads it when a compiled region is entered), the prior stance everywhere else."""

    def __init__(self, prior: Any) -> None:
        self._prior = prior
        self._thread = threading.get_ident()
        self.entries = 0

    @property
    def stance(self) -> str:
        if threading.get_ident() == self._thread:
            if _compiling_callback(sys._getframe(1)):
                self.entries += 1
            return "force_eager"
        return self._prior.stance

    @property
    def skip_guard_eval_unsafe(self) -> bool:
        return False if threading.get_ident() == self._thread else self._prior.skip_guard_eval_unsafe

    @property
    def backend(self) -> Any:
        return None if threading.get_ident() == self._thread else self._prior.backend


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
def eager_regions() -> Iterator[_EagerStance | None]:
    """Compiled regions run eagerly (and are counted) for the block; None where dynamo is not loaded."""
    eval_frame = _eval_frame()
    set_stance = getattr(eval_frame, "_set_stance", None) if eval_frame is not None else None
    if set_stance is None:  # a torch without dynamo's stance: nothing can be compiled eagerly
        yield None
        return
    current = eval_frame._stance
    if isinstance(current, _EagerStance):  # a capture inside a capture: the outer one's stance serves
        yield current
        return
    stance = _EagerStance(current)
    try:
        prior = set_stance(stance)
    except RuntimeError:  # called inside a compiled region: dynamo refuses a stance change there
        yield None
        return
    try:
        yield stance
    finally:
        eval_frame._stance = prior  # as `_set_stance(prior)`, without its in-region check


def disclose(findings: Any, unwrapped: dict[str, Any] | None, submodules: list[str],
             stance: _EagerStance | None) -> None:
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
