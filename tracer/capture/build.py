"""Turning a finished capture session's raw records into the immutable Trace IR."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import torch
from torch import nn

from .kernel import native  # the C kernel's entry points (None: the Python kernel)
from .call_template import call_templates
from ..ir import (Edge, ModuleCallRecord, ModuleScope, Op, ParamRecord, SourceSite, TensorMeta, Trace, new_edge, new_meta, new_module_call,
                  new_module_scope, new_op, new_param, new_site)
from ..provenance import Provenance
from ..store.codec import gc_paused
from .walk import named_state
from .session import (TEMPLATE_FIELDS, R_CALL, R_INFO, R_INPLACE, R_IO, R_META, R_N_OUT, R_OUT_IDX, R_PARAMS, R_PARENTS,
                      R_CALLSPEC, R_SITE, R_STACK, R_WRITES, CaptureSession, line_at)


def build_ops(session: CaptureSession) -> tuple[Op, ...]:
    """The session's raw records as Ops (labels, metadata strings and records made here, once).

    One linear pass; the cyclic GC is paused while it builds its 100,000s of small acyclic records.
    """
    with gc_paused():
        return _build_ops(session)


def _build_ops(session: CaptureSession) -> tuple[Op, ...]:
    records = session.records
    labels = _labels(records)
    # Keyed by the raw tuple's id: capture shares one tuple per distinct metadata and site (hashing a
    # site's code object, or a shape, per op costs more than the rest of the record).
    metas: dict[int, TensorMeta] = {}
    sites: dict[int, SourceSite | None] = {id(None): None}
    templates = call_templates(records, TEMPLATE_FIELDS, session.snapshots)
    if _BUILD_OPS is not None:  # the same loop in C (native.py)
        return tuple(_BUILD_OPS(records, labels, templates, metas, sites, _meta, _site, _unique))
    ops = []
    append = ops.append
    for idx, rec in enumerate(records):
        info = rec[R_INFO]
        stack = rec[R_STACK]  # a ModuleStack: its innermost entry read directly
        module, call = stack.entry or _ROOT
        parents = rec[R_PARENTS]
        raw = rec[R_META]
        meta = metas.get(id(raw)) or _meta(raw, metas)
        raw = rec[R_SITE]
        site = sites.get(id(raw), _UNSEEN)
        if site is _UNSEEN:
            site = _site(raw, sites)
        params = rec[R_PARAMS]
        writes = rec[R_WRITES]
        append(new_op(  # positional, in field order: a keyword call costs half as much again
            idx, labels[idx], info.kind, info.qualname,
            ((new_edge(labels[parents[0][0]], parents[0][1]),) if len(parents) == 1 else
             tuple([new_edge(labels[p], pos) for p, pos in parents])) if parents else (),
            meta, rec[R_CALL], rec[R_OUT_IDX], rec[R_N_OUT], module, call, stack,
            params if len(params) < 2 else _unique(params),
            writes if len(writes) < 2 else _unique(writes),
            rec[R_INPLACE],
            site,
            rec[R_IO], templates[idx],
        ))
    return tuple(ops)


_UNSEEN = object()
_ROOT = ("", 0)  # the module and call of an op outside every module
# The Op fields `_build_ops` passes by position, in order (checked once here, so a field inserted
# into Op cannot silently shift them).
_POSITIONAL = ("index", "label", "kind", "func", "parents", "out", "func_call_id", "output_index", "num_outputs",
               "module", "module_call", "module_stack", "params", "buffer_writes", "inplace", "source", "io_path",
               "attrs")
if tuple(f.name for f in dataclasses.fields(Op))[:len(_POSITIONAL)] != _POSITIONAL:
    raise ImportError("tracer.capture.build passes Op fields by position and Op's fields changed order")


def _configure_c_build() -> Callable[..., Any] | None:
    """`native.build_ops` set up for Op and Edge, or None (not built, or Op's later fields do not all
    default to None, which the C loop sets them to)."""
    if native.build_ops is None or native.configure_build is None:
        return None
    fields = dataclasses.fields(Op)
    if any(f.default is not None for f in fields[len(_POSITIONAL):]):
        return None
    native.configure_build(Op, tuple(Op.__dict__[f.name] for f in fields), Edge,
                            tuple(Edge.__dict__[f.name] for f in dataclasses.fields(Edge)), _ROOT)
    return native.build_ops


_BUILD_OPS = _configure_c_build()
_OP_LABELS = native.op_labels


def _configure_c_modules() -> Callable[..., Any] | None:
    """`native.module_scopes` set up for ModuleCallRecord and ModuleScope, or None (not built)."""
    if native.module_scopes is None or native.configure_modules is None:
        return None
    native.configure_modules(*(x for cls in (ModuleCallRecord, ModuleScope)
                                for x in (cls, tuple(cls.__dict__[f.name] for f in dataclasses.fields(cls)))))
    return native.module_scopes


_MODULE_SCOPES = _configure_c_modules()


def _configure_c_params() -> Callable[..., Any] | None:
    """`native.param_records` set up for ParamRecord, or None (not built)."""
    if native.param_records is None or native.configure_params is None:
        return None
    native.configure_params(ParamRecord, tuple(ParamRecord.__dict__[f.name] for f in dataclasses.fields(ParamRecord)))
    return native.param_records


_PARAM_RECORDS = _configure_c_params()


def live_calls(session: CaptureSession, ops: tuple[Op, ...]) -> dict[str, tuple]:
    """Op label -> (func, args, kwargs) of the live call that produced it (for replay; kept only with values)."""
    if not session.save_values:  # no record holds its live call
        return {}
    with gc_paused():
        return {ops[i].label: rec[R_CALLSPEC] for i, rec in enumerate(session.records) if rec[R_CALLSPEC] is not None}


def build_trace(session: CaptureSession, ops: tuple[Op, ...], *, save: Any, provenance: Provenance, output: Any,
                warnings: tuple[str, ...], calls: dict[str, tuple], envelope: Any = None) -> Trace:
    """The one Trace of a capture: every finding is already in `provenance` and `warnings`.

    Built with the cyclic GC paused: a value per op (a detached tensor) and the trace's indexes are
    100,000s of new objects, which would otherwise start full collections over the whole heap.
    """
    with gc_paused():
        return _build_trace(session, ops, save=save, provenance=provenance, output=output, warnings=warnings,
                            calls=calls, envelope=envelope)


def _build_trace(session: CaptureSession, ops: tuple[Op, ...], *, save: Any, provenance: Provenance, output: Any,
                 warnings: tuple[str, ...], calls: dict[str, tuple], envelope: Any) -> Trace:
    labels = [op.label for op in ops]
    named = dict(session.named)  # an address a module adopted during the forward took holds the new module
    values = _select_values(session, ops, save)  # may add a session warning (a value changed behind the capture)
    return Trace(
        ops=ops,
        modules=_modules(session, labels, named),
        params=_params(session, named),
        model_class=type(session.model).__name__,
        provenance=provenance,
        values=values,
        output=output,
        warnings=tuple(session.warnings) + warnings,
        live_calls=calls,
        envelope=envelope,
    )


def _labels(records: list) -> list[str]:
    if _OP_LABELS is not None:  # the same loop in C (native.py)
        return _OP_LABELS(records)
    counts: dict[str, int] = {}
    labels = []
    for rec in records:
        kind = rec[R_INFO].kind
        n = counts.get(kind, 0) + 1
        counts[kind] = n
        labels.append(f"{kind}_{n}")
    return labels


def _meta(raw: tuple, cache: dict) -> TensorMeta:
    """The TensorMeta of a raw (shape, dtype, device, grad) tuple, cached by the tuple's id (this build's
    cache) and by its value (every capture's: a model captured again makes no new one)."""
    hit = _METAS.get(raw)
    if hit is None:
        if len(_METAS) >= _MAX_SHARED:
            _METAS.clear()
        shape, dtype, device, rg = raw
        hit = _METAS[raw] = new_meta(shape=tuple(shape), dtype=_dtype_text(dtype), device=str(device), requires_grad=rg)
    cache[id(raw)] = hit
    return hit


# TensorMeta and SourceSite are immutable: one per distinct value serves every trace of the process.
_METAS: dict[tuple, TensorMeta] = {}
_SITES: dict[tuple[int, int], tuple[Any, SourceSite]] = {}  # (id(code), offset) -> (code, its site): the code held
_MAX_SHARED = 1 << 16  # entries per cache before it starts again


def _dtype_text(dtype: torch.dtype) -> str:
    """`float32` for torch.float32 (cached: every op and parameter names one)."""
    text = _DTYPE_TEXT.get(dtype)
    if text is None:
        text = _DTYPE_TEXT[dtype] = str(dtype).replace("torch.", "")
    return text


_DTYPE_TEXT: dict[torch.dtype, str] = {}


def _site(raw: tuple | None, cache: dict) -> SourceSite | None:
    """The SourceSite of a raw (code, instruction offset) tuple, cached by the tuple's id (this build's cache)
    and by the code and offset (every capture's)."""
    if raw is None:
        return None
    code, offset = raw
    key = (id(code), offset)  # by the code's id: hashing a code object hashes its bytecode
    shared = _SITES.get(key)
    if shared is None or shared[0] is not code:
        if len(_SITES) >= _MAX_SHARED:
            _SITES.clear()
        shared = _SITES[key] = (code, new_site(file=_short_path(code.co_filename), line=line_at(code, offset),
                                               function=code.co_name))
    hit = cache[id(raw)] = shared[1]
    return hit


def _short_path(path: str) -> str:
    """Paths inside site-packages read from the package down (`transformers/models/...`)."""
    marker = os.sep + "site-packages" + os.sep
    i = path.rfind(marker)
    return path[i + len(marker):] if i >= 0 else path


def _unique(items: tuple) -> tuple:
    return tuple(dict.fromkeys(items))


def _select_values(session: CaptureSession, ops: tuple[Op, ...], save: Any) -> dict[str, torch.Tensor]:
    if not session.save_values:
        return {}
    raw = session.finished_values()
    keep: Callable[[Op], bool] = save if callable(save) else (lambda op: True)
    return {ops[i].label: t for i, t in raw.items() if keep(ops[i])}


def _modules(session: CaptureSession, labels: list[str], named: dict[str, nn.Module]) -> dict[str, ModuleScope]:
    addr_of = session.module_addr  # canonical addresses: a shared child counts under its first path only
    if _MODULE_SCOPES is not None:  # the same loop in C (native.py)
        return _MODULE_SCOPES(named, session.module_calls, labels, session.tied, addr_of)
    own_params: dict[str, list[str]] = {}
    for canonical, aliases in session.tied.items():
        for full in (canonical, *aliases):
            own_params.setdefault(full.rpartition(".")[0], []).append(full)
    module_calls = session.module_calls
    label_of = labels.__getitem__
    scopes: dict[str, ModuleScope] = {}
    for addr, module in named.items():
        subs = module._modules
        children = _children(addr, subs, addr_of) if subs else ()  # most modules are leaves
        made = module_calls.get(addr)
        calls = tuple([
            new_module_call(c, tuple(map(label_of, ins)), tuple(map(label_of, outs)),
                            first if first <= last else -1, last if first <= last else -1)
            for c, ins, outs, first, last in (sorted(made) if len(made) > 1 else made)
        ]) if made else ()
        own = own_params.get(addr)
        scopes[addr] = new_module_scope(addr, type(module).__name__, tuple(own) if own else (), children, calls,
                                        module.training)
    return scopes


def _children(addr: str, subs: dict, addr_of: dict[int, str]) -> tuple[str, ...]:
    """The canonical addresses of a module's children that live under it (not first reached elsewhere)."""
    found = []
    for child in subs.values():
        if child is not None:
            path = addr_of.get(id(child))
            if path is not None and path.rpartition(".")[0] == addr:
                found.append(path)
    return tuple(found)


def _params(session: CaptureSession, named: dict[str, nn.Module]) -> dict[str, ParamRecord]:
    """Each parameter and buffer at its first address, as its module holds it after the forward."""
    if _PARAM_RECORDS is not None:  # the same loop in C (native.py); None: one is not where it was found
        found = _PARAM_RECORDS(session.tied, named, _DTYPE_TEXT, _dtype_text, _DEVICE_TEXT, _device_text)
        return found if found is not None else _params_walked(session)
    records: dict[str, ParamRecord] = {}
    for addr, others in session.tied.items():
        owner, _, name = addr.rpartition(".")
        module = named.get(owner)
        t = is_buffer = None
        if module is not None and type(module._parameters) is dict and type(module._buffers) is dict:
            t = module._parameters.get(name)
            is_buffer = t is None
            if is_buffer:
                t = module._buffers.get(name)
        if t is None:  # gone from where it was found (a module replaced during the forward), or TorchScript's
            return _params_walked(session)  # tables: the full walk
        records[addr] = new_param(addr, tuple(t.shape), _dtype_text(t.dtype), _device_text(t.device),
                                  bool(t.requires_grad), is_buffer, tuple(others))
    return records


def _params_walked(session: CaptureSession) -> dict[str, ParamRecord]:
    model, tied, every = session.model, session.tied, session.every
    records: dict[str, ParamRecord] = {}
    buffers = dict(named_state(model, "_buffers", remove_duplicate=False, modules=every))
    tensors = dict(named_state(model, "_parameters", remove_duplicate=False, modules=every))
    tensors.update(buffers)
    for addr, others in tied.items():
        t = tensors[addr]
        records[addr] = new_param(address=addr, shape=tuple(t.shape), dtype=_dtype_text(t.dtype), device=str(t.device),
                                  requires_grad=bool(t.requires_grad), is_buffer=addr in buffers, tied=tuple(others))
    return records


def _device_text(device: torch.device) -> str:
    """`cuda:0` for torch.device("cuda", 0) (cached)."""
    text = _DEVICE_TEXT.get(device)
    if text is None:
        text = _DEVICE_TEXT[device] = str(device)
    return text


_DEVICE_TEXT: dict[torch.device, str] = {}
