"""Families of plumbing ops a figure can leave out; edges through a hidden op join its neighbours.

`PLUMBING` (hidden by default in paper figures): shape ops, mask and constant builders, casts,
dropout (an identity in eval mode) and the KV-cache outputs. `norm` is available on request.
"""
from __future__ import annotations

from typing import Iterable

from ..errors import FigureOptionsError
from tracer.ir import INPUT_KIND, OUTPUT_KIND, Op, Trace

SHAPE_KINDS = frozenset({
    "view", "reshape", "transpose", "permute", "contiguous", "unsqueeze", "squeeze", "expand", "expand_as",
    "flatten", "unflatten", "split", "chunk", "getitem", "cat", "stack", "narrow", "select", "slice", "t", "movedim",
    "repeat", "repeat_interleave", "clone", "detach",
})
MASK_KINDS = frozenset({
    "arange", "zeros", "ones", "full", "empty", "tensor", "zeros_like", "ones_like", "full_like", "empty_like",
    "new_zeros", "new_ones", "new_full", "new_empty", "tril", "triu", "le", "lt", "ge", "gt", "eq", "ne", "where",
    "masked_fill", "bitwise_and", "bitwise_or", "logical_and", "logical_or", "logical_not",
})
CAST_KINDS = frozenset({"to", "float", "half", "bfloat16", "double", "int", "long", "bool", "type", "type_as"})
CACHE_NAMES = ("cache", "past_key_values", "present")

FAMILIES = {
    "shape": "view, reshape, transpose, permute, contiguous, (un)squeeze, expand, split, chunk, getitem, cat, ...",
    "mask": "arange, zeros/ones/full/tensor, tril/triu, comparisons, where, masked_fill (mask and index builders)",
    "cast": "to, float, half, bfloat16, double, int, long, bool, type_as",
    "dropout": "dropout (an identity in eval mode)",
    "cache": "model outputs under a cache name (cache, past_key_values, present)",
    "norm": "ops inside *Norm modules and norm ops (layer_norm, rms_norm, rsqrt)",
}
PLUMBING = ("shape", "mask", "cast", "dropout", "cache")


def hidden_ops(trace: Trace, families: Iterable[str]) -> frozenset[str]:
    """Labels of the ops of `trace` in the named families (model inputs are never hidden)."""
    wanted = frozenset(families)
    unknown = sorted(wanted - FAMILIES.keys())
    if unknown:
        raise FigureOptionsError(f"unknown op families to hide: {unknown}", site="hide=",
                                 remedy=f"Use any of: {', '.join(FAMILIES)} (PLUMBING = {', '.join(PLUMBING)}).",
                                 unknown=unknown)
    if not wanted:
        return frozenset()
    norm_modules = {a for a, m in trace.modules.items() if "norm" in m.class_name.lower()}
    hidden: set[str] = set()
    sourceless: set[str] = set()  # hidden ops with no drawn op anywhere upstream (an arange, a mask from it)
    for op in trace.ops:  # execution order: an op's inputs are decided before it
        if _family_hit(op, wanted, norm_modules):
            hidden.add(op.label)
            if all(edge.source in sourceless for edge in op.parents):
                sourceless.add(op.label)
        elif _fed_only_by(op, sourceless):
            hidden.add(op.label)
            sourceless.add(op.label)
    return frozenset(hidden)


def _fed_only_by(op: Op, sourceless: set[str]) -> bool:
    """True for an op computed only from hidden ops that nothing drawn feeds (`add 8` on a hidden `arange`):
    drawn, it would be an orphan with no input. An op fed through hidden plumbing by a drawn op (attention
    after its views, a residual add after dropout) keeps its edges, bridged, and stays drawn; so do model
    inputs/outputs and ops holding parameters."""
    if op.kind in (INPUT_KIND, OUTPUT_KIND) or op.params or not op.parents:
        return False
    return all(edge.source in sourceless for edge in op.parents)


def _family_hit(op: Op, wanted: frozenset[str], norm_modules: set[str]) -> bool:
    kind = op.kind.lower()
    if op.kind == INPUT_KIND:
        return False
    if op.kind == OUTPUT_KIND:
        head = op.io_path.split(".", 1)[0].lower()
        return "cache" in wanted and any(name in head for name in CACHE_NAMES)
    return (("shape" in wanted and kind in SHAPE_KINDS) or ("mask" in wanted and kind in MASK_KINDS)
            or ("cast" in wanted and kind in CAST_KINDS) or ("dropout" in wanted and "dropout" in kind)
            or ("norm" in wanted and (op.module in norm_modules or "norm" in kind or kind == "rsqrt")))
