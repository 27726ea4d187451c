"""The fast lane of `validate`: a chunk of calls replayed and perturbed with a few kernel calls per kind.

Of a chunk of calls, those whose recorded outputs are plain tensors and whose parents were all saved
take the lane. Calls of one pointwise kernel (the kernel table's `is_pointwise`) with equal other
arguments, whose parents all have the output's shape, are replayed together: each parent position
stacked along a new leading dimension, one call, and every slice compared with its recorded output.
Each floating parent position is then perturbed with noise in one more call, and a slice that moved
proves that call's edge. The other calls are replayed one at a time, their replays compared together
(`batch.equal_each`), and each small floating parent perturbed (`batch.noisy_each`) and replayed.

The lane only proves: a call it marks exact reproduced every recorded output bit for bit (a stacked
replay that does not, a kernel whose vectorised path rounds otherwise, is replayed alone); an edge it
marks carrying moved the output that reads it. Everything else (a mismatch, an unchanged output, a
random kernel, a failing replay, an edge the lane does not try) goes through the full checks.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ..ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op
from .batch import SMALL, equal_each, equal_rows, noisy_each, row_major_small
from .interpreter import ReplayError, dependence_declared_absent, is_nondeterministic, is_pointwise, substitute
from .offline import NotReplayable
from .received import ReceivingReplayer

_SYNTHETIC = (INPUT_KIND, OUTPUT_KIND, CONSTANT_KIND)
_Tensor = torch.Tensor
_SCALARS = (int, float, bool, complex, str, type(None))
CHUNK = 512  # calls per chunk: the replays of a chunk are held until they are compared


class _Chunk:
    """What the lane found for each call of a chunk: exact replay, and the edges proven to carry data."""

    def __init__(self, n: int) -> None:
        self.exact = [False] * n
        self.carrying: dict[int, set[str]] = {}

    def carries(self, call: int, position: str) -> None:
        self.carrying.setdefault(call, set()).add(position)

    def result(self) -> list[frozenset[str] | None]:
        return [frozenset(self.carrying.get(c, ())) if e else None for c, e in enumerate(self.exact)]


def fast_lane(replayer: ReceivingReplayer, calls: Sequence[list[Op]], gen: torch.Generator,
              perturb: bool) -> list[frozenset[str] | None]:
    """Per call: None (take the full checks), or the positions of the edges proven to carry data
    when every output replayed bit for bit (an empty set when `perturb` is off)."""
    found = _Chunk(len(calls))
    stackable: dict[tuple, list[int]] = {}
    alone: list[int] = []
    stacked_ok = replayer.resolve is None  # arguments loaded on demand (offloaded weights) are never stacked
    for c, ops in enumerate(calls):
        call = _admitted(replayer, ops)
        if call is None:
            continue
        key = _stack_key(replayer, ops, call) if stacked_ok else None
        if key is None:
            alone.append(c)
        else:
            stackable.setdefault(key, []).append(c)
    for key, members in stackable.items():
        if len(members) == 1:
            alone += members
            continue
        _replay_stacked(replayer, [calls[c][0] for c in members], members, key, gen, perturb, found)
        alone += [c for c in members if not found.exact[c]]
    alone.sort()
    _replay_alone(replayer, calls, alone, gen, perturb, found)
    return found.result()


def _admitted(replayer: ReceivingReplayer, ops: list[Op]) -> tuple | None:
    """The call of `ops` when the lane may try it: plain recorded outputs, saved parents, not random."""
    first = ops[0]
    if first.kind in _SYNTHETIC:
        return None
    values, received = replayer.values, replayer.received
    for op in ops:
        if type(values.get(op.label)) is not _Tensor or op.label in received:
            return None
    for e in first.parents:
        if e.source not in values:
            return None
    try:
        call = replayer.call_of(first)
    except NotReplayable:
        return None
    return None if is_nondeterministic(first, call[1], call[2]) else call


def _stack_key(replayer: ReceivingReplayer, ops: list[Op], call: tuple) -> tuple | None:
    """What calls must share to be replayed stacked: the pointwise kernel, the output's shape and dtype,
    each parent's position, dtype and device, and every other argument (tensors by identity); None when
    this call cannot be stacked."""
    func, args, kwargs = call
    op = ops[0]
    if len(ops) != 1 or op.inplace or op.buffer_writes or op.out is None or not is_pointwise(func):
        return None
    shape, values = op.out.shape, replayer.values
    edges = op.parents
    parents = {e.position: e.source for e in edges}
    key: list[Any] = [func, shape, op.out.dtype]
    found = 0
    for position, a in _arguments(args, kwargs):
        source = parents.get(position)
        if source is not None:
            v = values[source]
            if type(v) is not _Tensor or v.shape != shape or v.layout is not _STRIDED or v.numel() > SMALL:
                return None
            key.append(("edge", position, v.dtype, v.device))
            found += 1
        elif isinstance(a, _Tensor):
            key.append(("tensor", position, id(a)))
        elif type(a) in _SCALARS:
            key.append(("value", position, type(a), repr(a)))  # 1, 1.0 and True, 0.0 and -0.0 stay apart
        else:
            return None
    if found != len(edges):
        return None  # a parent inside a list argument (cat, stack), or two at one position: not stacked
    return tuple(key)


_STRIDED = torch.strided
_POSITIONS = tuple(str(i) for i in range(64))


def _arguments(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """Every top-level argument with its position ("0", "1", ... or the keyword)."""
    named = zip(_POSITIONS, args) if len(args) <= len(_POSITIONS) else ((str(i), a) for i, a in enumerate(args))
    return [*named, *kwargs.items()] if kwargs else list(named)


def _replay_stacked(replayer: ReceivingReplayer, ops: list[Op], members: list[int], key: tuple,
                    gen: torch.Generator, perturb: bool, found: _Chunk) -> None:
    """Replay single-output calls of one pointwise kernel together (see the module docstring)."""
    values = replayer.values
    func, args, kwargs = replayer.call_of(ops[0])  # every other argument is equal in the group (the key)
    sources = [{e.position: e.source for e in o.parents} for o in ops]  # the same positions in each (the key)
    try:
        stacks = {position: torch.stack([values[s[position]] for s in sources]) for position in sources[0]}
        out = _call(func, args, kwargs, stacks)
        want = torch.stack([values[o.label] for o in ops])
    except Exception:  # the kernel refused the stacked call: each call is replayed alone
        return
    if not (isinstance(out, _Tensor) and out.shape == want.shape and out.dtype == want.dtype):
        return
    exact = equal_rows(out, want)
    for c, ok in zip(members, exact):
        found.exact[c] = ok
    if not perturb or not any(exact):
        return
    for position, stack in stacks.items():
        if not (stack.is_floating_point() or stack.is_complex()) or not stack.numel():
            continue
        noise = torch.randn(stack.shape, generator=gen, dtype=torch.float32).to(dtype=stack.dtype,
                                                                               device=stack.device)
        try:
            moved = _call(func, args, kwargs, {**stacks, position: stack + noise})
        except Exception:  # outside the kernel's domain: the full check tries other perturbations
            continue
        if not (isinstance(moved, _Tensor) and moved.shape == out.shape and moved.dtype == out.dtype):
            continue
        for c, op, ok, still in zip(members, ops, exact, equal_rows(moved, out)):
            if ok and not still and not dependence_declared_absent(op, position):
                found.carries(c, position)


def _call(func: Any, args: tuple, kwargs: dict, subs: dict[str, torch.Tensor]) -> Any:
    new_args, new_kwargs = substitute(args, kwargs, subs)
    return func(*new_args, **new_kwargs)


def _replay_alone(replayer: ReceivingReplayer, calls: Sequence[list[Op]], members: list[int],
                  gen: torch.Generator, perturb: bool, found: _Chunk) -> None:
    """Replay each call on its own; compare the replays, then the perturbed replays, together."""
    values = replayer.values
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    tried: list[tuple[int, int]] = []
    for c in members:
        added = []
        for op in calls[c]:
            try:
                got = replayer.run(op)
            except ReplayError:
                break
            if not isinstance(got, _Tensor):
                break
            added.append((got, values[op.label]))
        else:
            pairs += added
            tried.append((c, len(added)))
    equal = equal_each(pairs)
    at = 0
    for c, k in tried:
        found.exact[c] = all(equal[at:at + k])
        at += k
    if perturb:
        _perturb_alone(replayer, calls, [c for c, _ in tried if found.exact[c]], gen, found)


def _perturb_alone(replayer: ReceivingReplayer, calls: Sequence[list[Op]], members: list[int],
                   gen: torch.Generator, found: _Chunk) -> None:
    values = replayer.values
    tasks: list[tuple[int, str, list[Op], torch.Tensor]] = []  # (call, position, outputs that read it, parent)
    for c in members:
        ops = calls[c]
        for edge in ops[0].parents:
            parent = values[edge.source]
            if not (row_major_small(parent) and (parent.is_floating_point() or parent.is_complex()) and parent.numel()):
                continue
            needing = [op for op in ops if not dependence_declared_absent(op, edge.position)]
            if needing:
                tasks.append((c, edge.position, needing, parent))
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    tried: list[tuple[int, str, int]] = []
    for (c, position, needing, _parent), noisy in zip(tasks, noisy_each([t[3] for t in tasks], gen)):
        added = []
        for op in needing:
            try:
                got = replayer.run(op, {position: noisy})
            except ReplayError:
                break  # outside the kernel's domain: the full check tries other perturbations
            if not isinstance(got, _Tensor):
                break
            added.append((got, values[op.label]))
        else:
            pairs += added
            tried.append((c, position, len(added)))
    equal = equal_each(pairs)
    at = 0
    for c, position, k in tried:
        if not any(equal[at:at + k]):  # every output that reads the edge moved
            found.carries(c, position)
        at += k
