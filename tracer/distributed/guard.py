"""The per-call guard of a distributed capture: DTensor layouts, DTensor <-> local edges, collectives.

It observes and never changes a call. A DTensor enters or leaves its local shard outside the
function mode (`DTensor.from_local`, `to_local`, the tensor-parallel hooks), so the guard joins
the two by identity: a DTensor whose local shard an op produced reads as that op, and an op's
DTensor output makes its local shard read as the op. Layouts and collectives are collected by
record index and turned into Op fields once, after the capture (`annotate.annotate_ops`).
"""
from __future__ import annotations

import weakref
from typing import Any

from .admission import is_dtensor
from ..capture.functions import INFO_CACHE, func_info
from ..capture.session import CallGuard, CaptureSession
from ..ir import Collective, ShardLayout, TensorMeta
from .collectives import c10d_functions, collective_kind, describe_call, refusal
from .layout import local_meta, shard_layout


class DistributedGuard(CallGuard):
    """Collects layouts (record index -> layout, local meta) and collectives (record index -> Collective)."""

    def __init__(self) -> None:
        self.layouts: dict[int, tuple[ShardLayout, TensorMeta]] = {}
        self.collectives: dict[int, Collective] = {}
        self._pending: Collective | None = None
        self._kinds: dict[str, tuple[str, str] | None] = {}
        self._indexed = False
        self._modules: list = []
        self.simulated = _process_group().get("backend") == "fake"  # a fake mesh moves no bytes: all estimates
        _register_c10d_inplace()

    def before_call(self, info: Any, func: Any, args: tuple, kwargs: dict, session: CaptureSession) -> Any:
        """Alias unseen DTensor arguments to the op that made their local shard; note a collective."""
        self._pending = None
        if not self._indexed:
            self._indexed = True
            self._modules = session.every
            _index_local_shards(session)
        for a in args:
            if is_dtensor(a):
                _alias_to_local(a, session)
            elif type(a) in (list, tuple):
                for b in a:
                    if is_dtensor(b):
                        _alias_to_local(b, session)
        for a in kwargs.values():
            if is_dtensor(a):
                _alias_to_local(a, session)
        kind = self._kinds.get(info.qualname, _UNSEEN)
        if kind is _UNSEEN:
            kind = self._kinds[info.qualname] = collective_kind(info.qualname)
        if kind is not None:
            refused = refusal(kind[0], kind[1], kwargs)
            if refused is not None:  # before it runs: no rank has sent anything when every rank refuses here
                from ..errors import DistributedCaptureUnsupportedError

                message, state, remedy = refused
                raise DistributedCaptureUnsupportedError(message, site=f"torch.distributed.{kind[1]}", state=state,
                                                         remedy=remedy)
            self._pending = describe_call(kind[0], kind[1], args, kwargs, estimated=self.simulated)
        return None

    def after_call(self, info: Any, outputs: list, session: CaptureSession) -> None:
        """Record the outputs' layouts and the call's collective at their record indices."""
        end = len(session.records)
        start = end - len(outputs)
        if self._pending is not None:
            for i in range(start, end):
                self.collectives[i] = self._pending
            self._pending = None
        for k, t in enumerate(outputs):
            if is_dtensor(t):
                self.layouts[start + k] = (shard_layout(t), local_meta(t))
                _link_local(t._local_tensor, start + k, session)

    # -- after the capture ---------------------------------------------------------------------
    def annotate(self, ops: tuple) -> tuple:
        """`ops` with local shapes, layouts and collectives (see `annotate.annotate_ops`)."""
        from .annotate import annotate_ops

        return annotate_ops(ops, self)

    def localize(self, result: Any, model: Any) -> Any:
        """The built trace with DTensor parameter layouts and its saved values as local tensors."""
        from dataclasses import replace

        from .annotate import local_values, param_layouts

        values, freed = local_values(result.values)
        warnings = result.warnings
        if freed:
            warnings += (f"{len(freed)} saved values ({', '.join(freed[:4])}{', ...' if len(freed) > 4 else ''}) "
                         "had their storage freed after the forward (FSDP reshards its unsharded parameters); "
                         "they are not saved, so validation cannot replay the ops that read them",)
        return replace(result, params=param_layouts(result.params, model), values=values, warnings=warnings,
                       _children=None)

    def report(self, findings: Any) -> None:
        """`Provenance.distributed`: this rank, the group, meshes seen and the collectives' totals."""
        meshes = {(lay.mesh_shape, lay.mesh_dims, lay.mesh_ranks) for lay, _meta in self.layouts.values()}
        calls = {}  # one entry per call (a multi-output call shares one Collective)
        for c in self.collectives.values():
            calls[id(c)] = c
        if any(type(m).__name__ == "DistributedDataParallel" for _a, m in self._modules):
            findings.warn("DistributedDataParallel: the buffer broadcast its forward may issue goes through "
                          "torch.distributed._broadcast_coalesced, a C++ binding the capture does not see; it is not "
                          "recorded as a collective (the gradient all-reduces belong to the backward)")
        findings.add(distributed={
            **_process_group(),
            "meshes": [{"shape": list(s), "dims": list(d), "ranks": list(r)} for s, d, r in sorted(meshes)],
            "collectives": len(calls),
            "payload_bytes": sum(c.payload_bytes for c in calls.values()),
            "wire_bytes_estimate": sum(c.wire_bytes for c in calls.values()),
        })


_UNSEEN = object()


def _held(entry: Any, t: Any) -> bool:
    """Whether a tensor-map entry (the tensor, or a weak reference to it) is `t`."""
    ref = entry[1]
    return ref is t or (type(ref) is weakref.ReferenceType and ref() is t)


def _alias_to_local(dt: Any, session: CaptureSession) -> None:
    """An unseen DTensor argument reads as the op that produced its local shard (from_local)."""
    tmap = session.tmap
    hit = tmap.get(id(dt))
    if hit is not None and _held(hit, dt):
        return
    local = dt._local_tensor
    found = tmap.get(id(local))
    if found is not None and _held(found, local):
        tmap[id(dt)] = (found[0], session._ref(dt))


def _link_local(local: Any, index: int, session: CaptureSession) -> None:
    """The local shard of an op's DTensor output reads as that op (to_local), unless already known."""
    tmap = session.tmap
    hit = tmap.get(id(local))
    if hit is None or not _held(hit, local):
        tmap[id(local)] = (index, session._ref(local))


def _index_local_shards(session: CaptureSession) -> None:
    """A DTensor parameter's local shard reads as the parameter (FSDP all-gathers the shards themselves)."""
    from ..capture.walk import named_state

    for table in ("_parameters", "_buffers"):
        for _name, t in named_state(session.model, table, remove_duplicate=False, modules=session.every):
            addr = session.param_ids.get(id(t))
            if addr is not None and is_dtensor(t):
                session.param_ids.setdefault(id(t._local_tensor), addr)
    for _addr, module in session.every:  # FSDP2 all-gathers each parameter's padded flat shard
        for fsdp_param in _fsdp_params(module):
            addr = session.param_ids.get(id(getattr(fsdp_param, "sharded_param", None)))
            data = getattr(fsdp_param, "_sharded_param_data", None)
            if addr is not None and data is not None:
                session.param_ids.setdefault(id(data), addr)


def _fsdp_params(module: Any) -> list:
    """The FSDPParams of a `fully_shard` module (torch's private layout; empty when it differs)."""
    get_state = getattr(module, "_get_fsdp_state", None)
    if get_state is None:
        return []
    try:
        group = get_state()._fsdp_param_group
        return list(group.fsdp_params) if group is not None else []
    except (AttributeError, RuntimeError, AssertionError):
        return []


_registered = False


def _register_c10d_inplace() -> None:
    """c10d collectives write into their tensor argument: the function table marks them in place (once)."""
    global _registered
    if _registered:
        return
    for fn in c10d_functions():
        INFO_CACHE[fn] = func_info(fn)._replace(inplace=True)
    _registered = True


def _process_group() -> dict[str, Any]:
    import torch.distributed as dist

    if not dist.is_initialized():
        return {}
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": str(dist.get_backend())}
