"""Finding tensors inside the nested objects models take and return."""
from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

_MAX_DEPTH = 8


def iter_tensors(obj: Any, path: str = "", depth: int = 0, seen: set | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield `(path, tensor)` for every tensor in `obj`, in a stable order.

    Walks tensors, lists, tuples, dicts (ModelOutput included) and, for other objects
    such as a transformers `Cache`, their public attributes. Paths join keys with dots.
    """
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    if depth >= _MAX_DEPTH or obj is None or isinstance(obj, (str, bytes, int, float, bool, nn.Module)):
        return
    if seen is None:
        seen = set()
    if id(obj) in seen:
        return
    if isinstance(obj, dict):
        seen.add(id(obj))
        for key, value in obj.items():
            yield from iter_tensors(value, _join(path, str(key)), depth + 1, seen)
        return
    if isinstance(obj, (list, tuple)):
        seen.add(id(obj))
        for i, value in enumerate(obj):
            yield from iter_tensors(value, _join(path, str(i)), depth + 1, seen)
        return
    attrs = getattr(obj, "__dict__", None)
    if attrs and not type(obj).__module__.startswith(("torch", "builtins")):
        seen.add(id(obj))
        for key, value in attrs.items():
            if not key.startswith("_"):
                yield from iter_tensors(value, _join(path, key), depth + 1, seen)


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
