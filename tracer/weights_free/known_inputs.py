"""Inputs given with their values to a structure-only capture: the inputs' values are known, the weights' are not.

A weights-free forward may read an input's values: a vision tower's `grid_thw.tolist()`, an encoder's
`attention_mask.all()`, lengths from a mask. A real capture of the same inputs reads the same values,
so answering those reads from the inputs fabricates nothing. Each real dense input tensor (top level,
or inside plain lists, tuples and dicts) enters the forward as a meta tensor of its shape, strides and
dtype; a CPU copy of its values is its known value (`ConstantLedger.remember`, within its bound). A
value read answered from it (or from what is computed from inputs and constants alone) is disclosed
with basis "inputs"; a read that depends on weights still refuses. The caller's tensors are not
touched: the forward sees copies. Each such input is listed in `provenance["admission"]["known_inputs"]`.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .constants import ConstantLedger, meta_like

_MAX_DEPTH = 4


def to_meta_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict, list[tuple[str, Tensor, Tensor]]]:
    """`(args, kwargs, swapped)`: the inputs with each real dense tensor in plain containers replaced by a meta
    tensor like it; `swapped` is `(path, meta, real)` for each, paths named as the trace names inputs."""
    swapped: list[tuple[str, Tensor, Tensor]] = []
    new_args = tuple(_swap(a, f"args.{i}", swapped, 0) for i, a in enumerate(args))
    new_kwargs = {k: _swap(v, f"kwargs.{k}", swapped, 0) for k, v in kwargs.items()}
    return new_args, new_kwargs, swapped


def _swap(value: Any, path: str, swapped: list, depth: int) -> Any:
    if isinstance(value, Tensor):
        if value.is_meta or value.layout != torch.strided:
            return value
        meta = meta_like(value)
        if value.requires_grad:
            meta.requires_grad_(True)
        swapped.append((path, meta, value))
        return meta
    if depth >= _MAX_DEPTH:
        return value
    if type(value) in (list, tuple):
        return type(value)(_swap(v, f"{path}.{i}", swapped, depth + 1) for i, v in enumerate(value))
    if type(value) is dict:
        return {k: _swap(v, f"{path}.{k}", swapped, depth + 1) for k, v in value.items()}
    return value  # another object (a transformers Cache): its real tensors stay, and admission refuses them


def know(ledger: ConstantLedger, swapped: list[tuple[str, Tensor, Tensor]], given: str = "inputs",
         field: str = "input") -> list[dict[str, Any]]:
    """Give each swapped tensor's values (a CPU copy) to the ledger as its meta stand-in's known value, `given`
    from the caller's `given` ("inputs", "buffers"); the disclosure rows, named by `field`. A stand-in listed
    twice (a buffer two modules share) is given its value once."""
    rows, kept_for = [], {}  # id(stand-in) -> whether its value was kept (within the ledger's bound)
    for name, meta, real in swapped:
        kept = kept_for.get(id(meta))
        if kept is None:
            kept = kept_for[id(meta)] = ledger.remember(meta, real.detach().to("cpu", copy=True), given=given)
        rows.append({field: name, "shape": list(real.shape), "dtype": str(real.dtype).replace("torch.", ""),
                     "device": str(real.device), "values_known": kept})
    return rows
