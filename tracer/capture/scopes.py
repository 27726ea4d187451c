"""Module scopes: which module call each recorded op ran in, kept without leaving torch's fast path.

A module with hooks of its own (or any module, while global module hooks exist) gets a pre- and a
post-hook: its scope then opens after the user's pre-hooks and backward-hook wrapping of the inputs and
closes after the user's forward hooks changed the output. Every other module's forward is wrapped by an
instance attribute for the duration, which sees the same arguments and output there and keeps torch's
hook-free call path (a hook pair costs each module call about 3 us, and registering and removing it
about 8 us). A TorchScript module's forward is wrapped to record its call as one boundary op (no hooks
exist on TorchScript); the modules inside it run within it and get no scope.
"""
from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from . import fast_paths as _fast_paths  # fused kernels a function mode turns off
from .kernel import native as _native  # the C kernel's entry points (None: the Python kernel)
from .kernel.native import tensor_indices as _tensor_indices  # None without the C extension
from ..ir import ModuleStack
from .boundaries import outside_scripts
from .walk import named_modules, shallow_tensors

_UNSET = object()  # a module with no `forward` attribute of its own before the capture wrapped it
_getframe = sys._getframe
# The code of `nn.Module.__call__`'s implementation and of the closure it runs when hooks exist: a wrapped
# forward called from elsewhere (`module.forward(x)`, `checkpoint(module.forward, x)`) is not a module call.
_CALL_IMPL = nn.Module._call_impl.__code__
_CALL_IMPL_INNER = next((c for c in _CALL_IMPL.co_consts if isinstance(c, type(_CALL_IMPL)) and c.co_name == "inner"),
                        _CALL_IMPL)
if _native.configure_scopes is not None:
    _native.configure_scopes(_CALL_IMPL, _CALL_IMPL_INNER, ModuleStack,
                              tuple(ModuleStack.__dict__[name] for name in ModuleStack.__slots__))
# The wrapper in C (enter, forward, leave in one call), for a module without a fused fast path; None: the closure.
_SCOPED_FORWARD = _native.ScopedForward
_WRAP_FORWARDS = _native.wrap_forwards  # `_scope_all`'s loop over the plain modules, in C
_UNWRAP_FORWARDS = _native.unwrap_forwards  # `_unwrap`'s loop, in C


def _global_module_hooks() -> bool:
    """Whether global module hooks exist (then every module's scope is kept by hooks, after theirs)."""
    m = nn.modules.module
    return bool(m._global_forward_pre_hooks or m._global_forward_hooks or m._global_backward_hooks
                or m._global_backward_pre_hooks)


class ModuleScopes:
    """The module-scope half of `CaptureSession` (a mixin: it reads and writes the session's frames,
    stack, module addresses, call counts, module calls and records; `_indices_of` and `_script_forward` are the session's)."""

    def _enter_scopes_of(self, module: nn.Module, addr: str) -> None:
        """Open and close `module`'s scope around each of its calls, by hooks or by a forward wrapper."""
        if isinstance(module, torch.jit.ScriptModule):  # no hooks on TorchScript: a wrapper recording one op
            self._wrap(module, addr, script=True)
        elif self.hook_all or module._forward_pre_hooks or module._forward_hooks or module._backward_hooks \
                or module._backward_pre_hooks:
            self.handles.append(module.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post_hook, with_kwargs=True, always_call=True))
        else:
            self._wrap(module, addr)

    def _pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self._enter(module, self.module_addr[id(module)], args, kwargs)

    def _post_hook(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        addr = self.module_addr[id(module)]
        frame = next((f for f in reversed(self.frames) if f[0] == addr), None)  # hooks run on every exit
        if frame is not None:
            self._leave(frame, output)

    def _wrap(self, module: nn.Module, addr: str, script: bool = False) -> None:
        """Route `module`'s forward through its scope (an instance attribute; `_unwrap` removes it). A
        TorchScript module's forward is recorded as one boundary op, called through its scope or not."""
        inner = module.forward  # the class's, or an instance attribute already set (accelerate's offload hook)
        if script:
            inner = self._script_forward(module, inner)
        if _SCOPED_FORWARD is not None and not script and type(module) not in _fast_paths.FUSED_MODULES:
            self._set_forward(module, _SCOPED_FORWARD(self, module, addr, inner))  # what the closure below does
            return
        enter, leave = self._enter, self._leave

        def forward(*args: Any, **kwargs: Any) -> Any:
            code = _getframe(1).f_code
            if code is not _CALL_IMPL and code is not _CALL_IMPL_INNER:  # `module.forward(...)` called directly:
                return inner(*args, **kwargs)  # not a module call (no scope, as hooks would not fire either)
            frame = enter(module, addr, args, kwargs)
            output = None
            try:
                output = inner(*args, **kwargs)
            finally:
                leave(frame, output)
            return output

        forward.__wrapped__ = inner  # inspect.signature(module.forward) reads the forward's own
        forward.__self__ = module  # as a bound method's: checkpointing finds the module it runs
        self._set_forward(module, forward)

    def _set_forward(self, module: nn.Module, forward: Any) -> None:
        """Make `forward` the module's for the capture (an instance attribute; `_unwrap` puts back what was)."""
        state = module.__dict__
        self.wrapped.append((state, state.get("forward", _UNSET), forward))
        state["forward"] = forward

    def _install_scopes(self) -> None:
        """Scope every module of the model, and every module that joins it during the forward."""
        self.wrapped, self.handles, self.adopting = [], [], None
        self.hook_all = _global_module_hooks()
        self._scope_all(self.named)
        self.adopting = nn.modules.module.register_module_module_registration_hook(self._adopt_module)

    def _remove_scopes(self) -> None:
        """Remove what `_install_scopes` put in place, also after it stopped part-way."""
        if self.adopting is not None:
            self.adopting.remove()
        for h in self.handles:
            h.remove()
        self._unwrap()

    def _unwrap(self) -> None:
        """Put every wrapped module's `forward` attribute back as it was (absent, or what was set)."""
        if _UNWRAP_FORWARDS is not None and type(self.wrapped) is list:
            _UNWRAP_FORWARDS(self.wrapped, _UNSET)  # the loop below, in C
            self.wrapped = []
            return
        for state, previous, forward in self.wrapped:
            if state.get("forward") is forward:  # else replaced during the forward: theirs stays
                if previous is _UNSET:
                    del state["forward"]
                else:
                    state["forward"] = previous
        self.wrapped = []

    def _adopt_module(self, parent: nn.Module, name: str, child: Any) -> None:
        """A module that joins the model during the forward (BigBird swaps in a new attention module), with
        the modules inside it: wrapped at its address under `parent` when it is assigned, before its first call."""
        if not self.frames or not isinstance(child, nn.Module):
            return None
        base = self.module_addr.get(id(parent))
        if base is None:  # not assigned into this model
            return None
        prefix = f"{base}.{name}" if base else name
        joined = []
        for rel, module in named_modules(child):
            if id(module) in self.module_addr:  # already part of the model (a child moved under the new module)
                continue
            addr = f"{prefix}.{rel}" if rel else prefix
            self.module_addr[id(module)] = addr
            joined.append((addr, module))
        self.named.extend(joined)  # each replaces a module that held its address before the forward
        self._scope_all(joined)
        return None

    def _scope_all(self, walk: list[tuple[str, nn.Module]]) -> None:
        """Scope every module of a pre-order walk, except those inside a TorchScript module (they run in it)."""
        if _WRAP_FORWARDS is not None and _SCOPED_FORWARD is not None and type(walk) is list:
            # the plain modules wrapped in C as `_wrap` wraps them; the rest, in walk order, scoped below
            walk = _WRAP_FORWARDS(self, walk, self.hook_all, _fast_paths.FUSED_MODULES, torch.jit.ScriptModule, _UNSET,
                                  self.wrapped)
        for addr, module in outside_scripts(walk):
            self._enter_scopes_of(module, addr)

    def _enter(self, module: nn.Module, addr: str, args: tuple, kwargs: dict) -> list:
        fused = _fast_paths.check(self, module, addr, args, kwargs) if type(module) in _fast_paths.FUSED_MODULES \
            else None
        call = self.call_counts.get(addr, 0)
        self.call_counts[addr] = call + 1
        frame = [addr, call, self._indices_in(args, kwargs), len(self.records), self.stack, fused]  # the stack to restore on exit
        self.frames.append(frame)
        self.stack = self.stack.push(addr, call)
        return frame

    def _indices_in(self, *objs: Any) -> tuple[int, ...]:
        """The op indices of the tensors in `objs` (through lists, tuples and dicts) an earlier op produced:
        in C where built, else through the session's Python walk."""
        found = _tensor_indices(self.tmap, *objs) if _tensor_indices is not None else None
        if found is None:
            found = self._indices_of([t for obj in objs for t in shallow_tensors(obj)])
        return found

    def _leave(self, frame: list, output: Any) -> None:
        if frame[5] is not None:
            frame[5].exit()  # a fused call: its kernel and the mode are back in place
        frames = self.frames
        while frames:  # pop to this call's frame (the top one unless an inner call's exit never ran)
            top = frames.pop()
            self.stack = top[4]  # no new tuple per exit
            if top is frame:
                break
        else:
            return
        outputs = self._indices_in(output) if output is not None else ()
        self.module_calls.setdefault(frame[0], []).append((frame[1], frame[2], outputs, frame[3],
                                                           len(self.records) - 1))
