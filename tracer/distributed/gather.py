"""`gather(trace)`: every rank's per-rank trace onto one rank, as one Trace whose collectives join the ranks.

A collective call: every rank of the group sends its trace structure (the JSON a saved trace holds,
never pickle) to `dst` as a byte tensor. There the ranks' ops are merged into one sequence: each
op keeps its rank (`Op.rank`) and is relabelled `r{rank}.{label}`; the k-th collective of a group
on every member rank is matched as the same call, and each rank's collective op takes the peers'
inputs as extra parents (position `rank{q}.{position}`): the edges that join the ranks.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import DistributedGatherError
from ..ir import Edge, ModuleCallRecord, ModuleScope, Op, Trace
from ..provenance import Provenance


def gather(trace: Trace, *, dst: int = 0, group: Any = None) -> Trace | None:
    """Collective: on `dst`, one Trace of every rank's ops (with `Op.rank`); None on the other ranks."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise DistributedGatherError("tracer.distributed.gather needs an initialized process group",
                                     site="tracer.distributed.gather",
                                     remedy="Call it on every rank after torch.distributed.init_process_group.")
    if not isinstance(trace, Trace):
        raise DistributedGatherError(f"gather() needs a Trace, got {type(trace).__name__}", site="gather(trace=...)")
    from ..store.codec import encode_body

    blobs = _gather_bytes(encode_body(trace), dst, group)
    if blobs is None:
        return None
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    return merge_ranks([_decode(blob, rank) for rank, blob in zip(ranks, blobs)])


def _gather_bytes(payload: bytes, dst: int, group: Any) -> list[bytes] | None:
    import torch
    import torch.distributed as dist

    size = torch.tensor([len(payload)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size(group))]
    dist.all_gather(sizes, size, group=group)
    longest = int(max(s.item() for s in sizes))
    buffer = torch.zeros(longest, dtype=torch.uint8)
    buffer[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    mine = dist.get_rank() == dst
    chunks = [torch.zeros(longest, dtype=torch.uint8) for _ in sizes] if mine else None
    dist.gather(buffer, chunks, dst=dst, group=group)
    if not mine:
        return None
    return [bytes(c[:int(s.item())].numpy()) for c, s in zip(chunks, sizes)]


def _decode(blob: bytes, rank: int) -> tuple[int, Any]:
    from ..store.codec import decode_body

    return rank, decode_body(blob, site=f"rank {rank}'s trace")


def merge_ranks(bodies: list[tuple[int, Any]]) -> Trace:
    """One Trace from each rank's decoded trace body (see the module docstring)."""
    streams = {rank: body.ops for rank, body in bodies}
    order, peers, matched = _interleave(streams)
    stride = 1 + max((op.func_call_id for ops in streams.values() for op in ops), default=0)
    position = {(rank, streams[rank][i].label): n for n, (rank, i) in enumerate(order)}
    ops = []
    for n, (rank, i) in enumerate(order):
        op = streams[rank][i]
        parents = [Edge(f"r{rank}.{e.source}", e.position) for e in op.parents]
        for q, peer in peers.get((rank, i), ()):
            parents += [Edge(f"r{q}.{e.source}", f"rank{q}.{e.position}") for e in peer.parents]
        ops.append(replace(op, index=n, label=f"r{rank}.{op.label}", parents=tuple(parents),
                           func_call_id=op.func_call_id + rank * stride, rank=rank))
    first_rank, first = bodies[0]
    modules = {m.address: _relabel_calls(m, first_rank, first.ops, position) for m in first.modules}
    provenance = dict(first.provenance)
    provenance["distributed"] = {**dict(provenance.get("distributed") or {}), "gathered_ranks": sorted(streams),
                                 "rank_groups": rank_groups(streams), "matched_collectives": matched}
    warnings = tuple(f"rank {rank}: {w}" for rank, body in bodies for w in body.warnings)
    if matched * len(streams) < sum(1 for ops in streams.values() for op in ops if op.collective is not None):
        warnings += ("some collectives could not be matched across ranks (the ranks issued them in a different "
                     "order or number); those have no cross-rank edges",)
    return Trace(ops=tuple(ops), modules=modules, params={p.address: p for p in first.params},
                 model_class=first.model_class, provenance=Provenance.from_dict(provenance), warnings=warnings)


def _interleave(streams: dict[int, tuple[Op, ...]]) -> tuple[list[tuple[int, int]], dict, int]:
    """Merged op order (parents first), peer collectives per collective op, and how many calls matched."""
    pos = dict.fromkeys(streams, 0)
    seen: dict[int, dict[tuple, int]] = {r: {} for r in streams}
    order: list[tuple[int, int]] = []
    peers: dict[tuple[int, int], list[tuple[int, Op]]] = {}
    matched = 0
    while any(pos[r] < len(streams[r]) for r in streams):
        waiting = {}
        for r, ops in streams.items():
            while pos[r] < len(ops) and ops[pos[r]].collective is None:
                order.append((r, pos[r]))
                pos[r] += 1
            if pos[r] < len(ops):
                waiting[r] = _key(ops[pos[r]], seen[r])
        if not waiting:
            break
        first = min(waiting)
        key = waiting[first]
        members = [r for r in key[0] if r in streams] or [first]
        together = [r for r in members if waiting.get(r) == key]
        if sorted(together) != sorted(members):
            together = [first]  # the group's ranks disagree: this one goes alone
        else:
            matched += 1
        for r in together:
            peers[(r, pos[r])] = [(q, streams[q][pos[q]]) for q in together if q != r]
        for r in together:
            order.append((r, pos[r]))
            seen[r][key[:2]] = key[2] + 1
            pos[r] += 1
    return order, peers, matched


def _key(op: Op, seen: dict[tuple, int]) -> tuple:
    """(group, collective name, ordinal of that pair on this rank)."""
    c = op.collective
    return (tuple(c.group), c.name, seen.get((tuple(c.group), c.name), 0))


def _relabel_calls(scope: ModuleScope, rank: int, ops: tuple[Op, ...], position: dict) -> ModuleScope:
    """A module's call records with rank `rank`'s labels and merged positions."""
    def at(index: int) -> int:
        return position[(rank, ops[index].label)] if index >= 0 else -1

    calls = tuple(ModuleCallRecord(call=c.call, inputs=tuple(f"r{rank}.{x}" for x in c.inputs),
                                   outputs=tuple(f"r{rank}.{x}" for x in c.outputs),
                                   first_op=at(c.first_op), last_op=max(at(c.first_op), at(c.last_op)))
                  for c in scope.calls)
    return replace(scope, calls=calls)


def rank_groups(streams: dict[int, tuple[Op, ...]]) -> list[dict[str, Any]]:
    """Ranks whose traces are the same up to values (ops, local shapes, layouts, collectives), folded."""
    groups: dict[tuple, list[int]] = {}
    for rank, ops in streams.items():
        signature = tuple((op.kind, op.func, op.out, op.layout, op.parents, op.params, _shape_of(op.collective))
                          for op in ops)
        groups.setdefault(signature, []).append(rank)
    return [{"ranks": ranks, "label": f"x {len(ranks)} ranks" if len(ranks) > 1 else f"rank {ranks[0]}"}
            for ranks in sorted(groups.values())]


def _shape_of(c: Any) -> tuple | None:
    return None if c is None else (c.name, c.api, c.group, c.payload_bytes, c.wire_bytes, c.reduce_op)


def fold(gathered: Trace) -> Trace:
    """The gathered trace folded: one representative rank per group of identical ranks ("x N ranks")."""
    groups = (gathered.provenance.distributed or {}).get("rank_groups") or []
    return select_ranks(gathered, {g["ranks"][0] for g in groups})


def select_ranks(gathered: Trace, ranks: set[int] | frozenset[int]) -> Trace:
    """The ops of `ranks` only, out of a gathered trace (edges to other ranks dropped, module spans renumbered; for
    one rank, module call records name that rank's inputs and outputs where it has ops of the same labels)."""
    kept = [i for i, op in enumerate(gathered.ops) if op.rank in ranks]
    new_index = {old: new for new, old in enumerate(kept)}
    labels = {gathered.ops[i].label for i in kept}
    ops = tuple(replace(gathered.ops[old], index=new,
                        parents=tuple(e for e in gathered.ops[old].parents if e.source in labels))
                for new, old in enumerate(kept))

    (only,) = ranks if len(ranks) == 1 else (None,)

    def own(label: str) -> str:
        """A call record's label (the first rank's) as the selected rank's op of the same label, when it has one."""
        if only is None or label in labels or not label.startswith("r"):
            return label
        mine = f"r{only}.{label.partition('.')[2]}"
        return mine if mine in labels else label

    def span(call: ModuleCallRecord) -> ModuleCallRecord:
        inside = [new_index[i] for i in range(call.first_op, call.last_op + 1) if i in new_index]
        return replace(call, first_op=inside[0] if inside else -1, last_op=inside[-1] if inside else -1,
                       inputs=tuple(own(x) for x in call.inputs), outputs=tuple(own(x) for x in call.outputs))

    modules = {a: replace(m, calls=tuple(span(c) for c in m.calls)) for a, m in gathered.modules.items()}
    return replace(gathered, ops=ops, modules=modules, _children=None)
