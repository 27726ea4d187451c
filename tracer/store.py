"""Saving and loading traces: a folder with `trace.json` (structure) and `values.safetensors`.

No pickle anywhere. The JSON carries a format name, a schema version and SHA-256 digests of
its own canonical body and of the values file; loading checks all of them and the graph's
integrity, and refuses anything else with a typed `StoreError`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .digest import canonical_digest
from .errors import (StoreError, TraceFileCorruptError, TraceFileNotFoundError, TraceFileTamperedError,
                     TraceSchemaError)
from .ir import Edge, ModuleCallRecord, ModuleScope, Op, ParamRecord, SourceSite, TensorMeta, Trace
from .provenance import Provenance

FORMAT = "torchlens-explore.trace"
SCHEMA_VERSION = 1
STRUCTURE_FILE = "trace.json"
VALUES_FILE = "values.safetensors"


# -- save ------------------------------------------------------------------------------
def save_trace(trace: Trace, path: str | Path) -> Path:
    """Write `trace` into folder `path` (created if needed); returns the folder."""
    folder = Path(path)
    if folder.suffix == ".json":
        folder = folder.parent
    folder.mkdir(parents=True, exist_ok=True)
    values_digest = None
    values_path = folder / VALUES_FILE
    if trace.values:
        _write_values(trace, values_path)
        values_digest = _sha256_file(values_path)
    elif values_path.exists():
        values_path.unlink()
    body = trace_to_dict(trace)
    doc = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "digest": {"structure": _digest(body), "values": values_digest},
        "trace": body,
    }
    (folder / STRUCTURE_FILE).write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True))
    return folder


def _write_values(trace: Trace, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {label: t.detach().contiguous().clone() for label, t in trace.values.items()}
    save_file(tensors, str(path), metadata={"format": FORMAT})


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The JSON-able structure of a trace (values, output and live calls excluded)."""
    return {
        "model_class": trace.model_class,
        "ops": [_op_to_dict(op) for op in trace.ops],
        "modules": [_module_to_dict(m) for m in trace.modules.values()],
        "params": [_param_to_dict(p) for p in trace.params.values()],
        "provenance": _jsonable(trace.provenance.to_dict()),
        "warnings": list(trace.warnings),
        "envelope": trace.envelope.to_dict() if trace.envelope is not None else None,
    }


def _op_to_dict(op: Op) -> dict[str, Any]:
    return {
        "index": op.index, "label": op.label, "kind": op.kind, "func": op.func,
        "parents": [[e.source, e.position] for e in op.parents],
        "out": None if op.out is None else {
            "shape": list(op.out.shape), "dtype": op.out.dtype, "device": op.out.device,
            "requires_grad": op.out.requires_grad},
        "func_call_id": op.func_call_id, "output_index": op.output_index, "num_outputs": op.num_outputs,
        "module": op.module, "module_call": op.module_call,
        "module_stack": [[a, c] for a, c in op.module_stack],
        "params": list(op.params), "buffer_writes": list(op.buffer_writes), "inplace": op.inplace,
        "source": None if op.source is None else [op.source.file, op.source.line, op.source.function],
        "io_path": op.io_path, "attrs": _jsonable(dict(op.attrs)),
    }


def _module_to_dict(m: ModuleScope) -> dict[str, Any]:
    return {
        "address": m.address, "class_name": m.class_name, "params": list(m.params),
        "children": list(m.children), "training": m.training,
        "calls": [{"call": c.call, "inputs": list(c.inputs), "outputs": list(c.outputs),
                   "first_op": c.first_op, "last_op": c.last_op} for c in m.calls],
    }


def _param_to_dict(p: ParamRecord) -> dict[str, Any]:
    return {"address": p.address, "shape": list(p.shape), "dtype": p.dtype, "device": p.device,
            "requires_grad": p.requires_grad, "is_buffer": p.is_buffer, "tied": list(p.tied)}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _digest(body: dict) -> str:
    return canonical_digest(body)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- load ------------------------------------------------------------------------------
def load_trace(path: str | Path) -> Trace:
    """Load and verify a trace folder (or its trace.json). Refuses with a typed StoreError."""
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    structure = folder / STRUCTURE_FILE
    if not structure.is_file():
        raise TraceFileNotFoundError(f"no {STRUCTURE_FILE} at {folder}", site=str(folder),
                                     remedy="Pass the folder written by trace.save(path).")
    try:
        doc = json.loads(structure.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceFileCorruptError(f"{structure} is not valid JSON ({exc})", site=str(structure)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceSchemaError(f"{structure} is not a torchlens-explore trace", site=str(structure))
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise TraceSchemaError(
            f"schema version {doc.get('schema_version')!r} is not supported (this build reads {SCHEMA_VERSION})",
            site=str(structure))
    body, digest = doc.get("trace"), doc.get("digest")
    if not isinstance(body, dict) or not isinstance(digest, dict):
        raise TraceFileCorruptError(f"{structure} lacks its trace body or digest", site=str(structure))
    if _digest(body) != digest.get("structure"):
        raise TraceFileTamperedError(f"{structure} does not match its structure digest", site=str(structure))
    try:
        trace = trace_from_dict(body)
    except StoreError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TraceFileCorruptError(f"{structure} has a malformed record ({exc!r})", site=str(structure)) from None
    _check_graph(trace, str(structure))
    trace.values = _load_values(folder / VALUES_FILE, digest.get("values"), trace)
    return trace


def trace_from_dict(body: dict[str, Any]) -> Trace:
    """Rebuild a Trace from `trace_to_dict` output (an envelope comes back as HYPOTHESIS)."""
    ops = tuple(_op_from_dict(d) for d in body["ops"])
    modules = {d["address"]: _module_from_dict(d) for d in body["modules"]}
    params = {d["address"]: _param_from_dict(d) for d in body["params"]}
    envelope = None
    if body.get("envelope") is not None:
        from .claims import envelope_from_dict

        envelope = envelope_from_dict(body["envelope"])
    return Trace(ops=ops, modules=modules, params=params, model_class=str(body["model_class"]),
                 provenance=Provenance.from_dict(body["provenance"]), warnings=tuple(body["warnings"]), envelope=envelope)


def _op_from_dict(d: dict[str, Any]) -> Op:
    out = d["out"]
    src = d["source"]
    return Op(
        index=int(d["index"]), label=str(d["label"]), kind=str(d["kind"]), func=str(d["func"]),
        parents=tuple(Edge(str(s), str(p)) for s, p in d["parents"]),
        out=None if out is None else TensorMeta(tuple(int(x) for x in out["shape"]), str(out["dtype"]),
                                                str(out["device"]), bool(out["requires_grad"])),
        func_call_id=int(d["func_call_id"]), output_index=int(d["output_index"]),
        num_outputs=int(d["num_outputs"]), module=str(d["module"]), module_call=int(d["module_call"]),
        module_stack=tuple((str(a), int(c)) for a, c in d["module_stack"]),
        params=tuple(d["params"]), buffer_writes=tuple(d["buffer_writes"]), inplace=bool(d["inplace"]),
        source=None if src is None else SourceSite(str(src[0]), int(src[1]), str(src[2])),
        io_path=str(d["io_path"]), attrs=dict(d["attrs"]),
    )


def _module_from_dict(d: dict[str, Any]) -> ModuleScope:
    return ModuleScope(
        address=str(d["address"]), class_name=str(d["class_name"]), params=tuple(d["params"]),
        children=tuple(d["children"]), training=bool(d["training"]),
        calls=tuple(ModuleCallRecord(int(c["call"]), tuple(c["inputs"]), tuple(c["outputs"]),
                                     int(c["first_op"]), int(c["last_op"])) for c in d["calls"]),
    )


def _param_from_dict(d: dict[str, Any]) -> ParamRecord:
    return ParamRecord(address=str(d["address"]), shape=tuple(int(x) for x in d["shape"]), dtype=str(d["dtype"]),
                       device=str(d["device"]), requires_grad=bool(d["requires_grad"]),
                       is_buffer=bool(d["is_buffer"]), tied=tuple(d["tied"]))


def _check_graph(trace: Trace, site: str) -> None:
    seen: set[str] = set()
    for i, op in enumerate(trace.ops):
        if op.index != i or op.label in seen:
            raise TraceFileCorruptError(f"op {op.label!r} is out of order or duplicated", site=site)
        for edge in op.parents:
            if edge.source not in seen:
                raise TraceFileCorruptError(f"op {op.label!r} reads {edge.source!r}, which does not precede it", site=site)
        for addr in op.params:
            if addr not in trace.params:
                raise TraceFileCorruptError(f"op {op.label!r} consumes unknown parameter {addr!r}", site=site)
        seen.add(op.label)


def _load_values(path: Path, expected_digest: str | None, trace: Trace) -> dict[str, Any]:
    if expected_digest is None:
        if path.exists():
            raise TraceFileTamperedError(f"{path} is not recorded in the trace's digest", site=str(path))
        return {}
    if not path.is_file():
        raise TraceFileCorruptError(f"{path} is missing but the trace records saved values", site=str(path))
    if _sha256_file(path) != expected_digest:
        raise TraceFileTamperedError(f"{path} does not match its digest", site=str(path))
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        values = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise TraceFileCorruptError(f"{path} is not a readable safetensors file ({exc})", site=str(path)) from None
    for label, t in values.items():
        if label not in trace:
            raise TraceFileCorruptError(f"{path} holds a value for unknown op {label!r}", site=str(path))
        meta = trace[label].out
        if meta is None or tuple(t.shape) != meta.shape or str(t.dtype).replace("torch.", "") != meta.dtype:
            raise TraceFileCorruptError(f"the saved value of {label!r} disagrees with its recorded shape/dtype",
                                        site=str(path))
    return values
