"""Finding tensors inside the nested objects models take and return."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .kernel import native  # the C kernel's entry points (None: the Python kernel)

_MAX_DEPTH = 8
# The walks below in C where built (native.py); each returns None for a table that is no plain dict.
_C_NAMED_MODULES, _C_FIRST_VISITS, _C_NAMED_STATE = native.named_modules, native.first_visits, native.named_state


def iter_tensors(obj: Any, path: str = "", depth: int = 0, seen: set | None = None) -> list[tuple[str, torch.Tensor]]:
    """Every `(path, tensor)` in `obj`, in a stable order (a list: one recursive pass, no generator per level).

    Walks tensors, lists, tuples, dicts (ModelOutput included) and, for other objects
    such as a transformers `Cache`, their public attributes. Paths join keys with dots.
    """
    found: list[tuple[str, torch.Tensor]] = []
    _collect(obj, path, depth, set() if seen is None else seen, found)
    return found


def _collect(obj: Any, path: str, depth: int, seen: set, found: list) -> None:
    if isinstance(obj, torch.Tensor):
        found.append((path, obj))
        return
    if depth >= _MAX_DEPTH or obj is None or isinstance(obj, _LEAVES) or id(obj) in seen:
        return
    if isinstance(obj, dict):
        seen.add(id(obj))
        for key, value in obj.items():
            _collect(value, _join(path, str(key)), depth + 1, seen, found)
        return
    if isinstance(obj, (list, tuple)):
        seen.add(id(obj))
        for i, value in enumerate(obj):
            _collect(value, _join(path, str(i)), depth + 1, seen, found)
        return
    attrs = getattr(obj, "__dict__", None)
    if attrs and not type(obj).__module__.startswith(("torch", "builtins")):
        seen.add(id(obj))
        for key, value in attrs.items():
            if not key.startswith("_"):
                _collect(value, _join(path, key), depth + 1, seen, found)


_LEAVES = (str, bytes, int, float, bool, nn.Module)


def shallow_tensors(obj: Any) -> list[torch.Tensor]:
    """Tensors in `obj` through lists, tuples and dicts only (cheap; for module hooks)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    found: list[torch.Tensor] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def named_modules(model: nn.Module, *, remove_duplicate: bool = True) -> list[tuple[str, nn.Module]]:
    """`model.named_modules()` in torch's order, walked iteratively (linear at any nesting depth).

    torch's own walk nests one generator per level, so each module passes through every level
    above it: quadratic for deep chains, and recursive.
    """
    if _C_NAMED_MODULES is not None:
        walked = _C_NAMED_MODULES(model, remove_duplicate)
        if walked is not None:
            return walked
    found: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    stack: list[tuple[str, nn.Module]] = [("", model)]
    while stack:
        prefix, module = stack.pop()
        if remove_duplicate:
            if id(module) in seen:
                continue
            seen.add(id(module))
        found.append((prefix, module))
        children = [(f"{prefix}.{name}" if prefix else name, child)
                    for name, child in module._modules.items() if child is not None]
        stack.extend(reversed(children))
    return found


def first_visits(walked: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """A `named_modules(remove_duplicate=False)` walk reduced to `remove_duplicate=True`'s (same order)."""
    if _C_FIRST_VISITS is not None and type(walked) is list:
        return _C_FIRST_VISITS(walked)
    seen: set[int] = set()
    found = []
    for name, module in walked:
        if id(module) not in seen:
            seen.add(id(module))
            found.append((name, module))
    return found


def named_state(model: nn.Module, table: str, *, remove_duplicate: bool = True,
                modules: list[tuple[str, nn.Module]] | None = None) -> list[tuple[str, torch.Tensor]]:
    """`named_parameters()` (`table="_parameters"`) or `named_buffers()` (`"_buffers"`), in torch's order.

    `modules` is a `named_modules(remove_duplicate=False)` walk already made (either flag then holds).
    """
    walked = modules if modules is not None else named_modules(model, remove_duplicate=remove_duplicate)
    if _C_NAMED_STATE is not None and type(walked) is list:
        found_c = _C_NAMED_STATE(walked, table, remove_duplicate)
        if found_c is not None:
            return found_c
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    for prefix, module in walked:
        for name, t in getattr(module, table).items():
            if t is None or id(t) in seen:
                continue
            if remove_duplicate:
                seen.add(id(t))
            found.append((f"{prefix}.{name}" if prefix else name, t))
    return found


def params_and_buffers(model: nn.Module, *, modules: list[tuple[str, nn.Module]] | None = None
                       ) -> tuple[list[tuple[str, torch.Tensor]], list[tuple[str, torch.Tensor]]]:
    """`(named_parameters(), named_buffers())` as lists, from one module walk (`named_state`'s `modules`)."""
    walked = modules if modules is not None else named_modules(model, remove_duplicate=False)
    return named_state(model, "_parameters", modules=walked), named_state(model, "_buffers", modules=walked)
