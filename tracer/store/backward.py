"""The saved form of a backward, in one place: its record in trace.json and grads.safetensors beside it.

trace.json's `backward` member holds the nodes, saved-for-backward tensors and what was run, and names
the gradients file's version, SHA-256 and every gradient's shape and dtype. grads.safetensors holds
the gradients: `op:LABEL` (the gradient of op LABEL's first output, per the save_grads policy) and
`param:ADDRESS` (the parameter's `.grad` after the backward). The live autograd graph and the replay
gradients are not saved. A load checks every reference (node indices, op labels, parameter addresses),
bound, digest, shape and dtype, and refuses typed; a trace saved before the gradients file existed
loads with no gradients, as it did.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ..backward.records import BackwardNode, BackwardPass, SavedTensor
from ..errors import TraceFileCorruptError, TraceFileTamperedError, TraceSchemaError, TraceStructureInvalidError
from ..ir import TensorMeta
from .values import read_values, write_values

GRADS_VERSION = 1
OP, PARAM = "op:", "param:"
MAX_BYTES = 1 << 62


class GradsDoc(msgspec.Struct, forbid_unknown_fields=True):
    """The gradients file: its version, SHA-256, and `op:LABEL` / `param:ADDRESS` -> (shape, dtype)."""

    version: int
    digest: str
    tensors: dict[str, tuple[tuple[int, ...], str]]


class BackwardDoc(msgspec.Struct, forbid_unknown_fields=True):
    """The `backward` member of a trace body."""

    nodes: tuple[BackwardNode, ...]
    saved: dict[str, tuple[SavedTensor, ...]]
    loss: str
    estimate: bool
    no_node: tuple[str, ...]
    recomputed: dict[str, int]
    notes: tuple[str, ...]
    gradients: GradsDoc | None = None  # absent in traces saved before gradients were kept


def to_doc(bw: BackwardPass, gradients: GradsDoc | None = None) -> BackwardDoc:
    """What of a backward goes into trace.json (`gradients`: the record of its grads file, if written)."""
    return BackwardDoc(bw.nodes, bw.saved, bw.loss, bw.estimate, bw.no_node, bw.recomputed, bw.notes, gradients)


def from_doc(doc: BackwardDoc, labels: frozenset[str], modules: frozenset[str], site: str,
             params: frozenset[str] = frozenset()) -> BackwardPass:
    """The loaded backward (gradients not yet read), every reference and bound checked."""
    where = f"{site}: backward"
    n = len(doc.nodes)
    for i, node in enumerate(doc.nodes):
        at = f"{where}.nodes[{i}]"
        if node.index != i:
            raise TraceStructureInvalidError(f"{at}: index {node.index} is not its position", site=at)
        if node.op is not None and node.op not in labels:
            raise TraceStructureInvalidError(f"{at}: op {node.op!r} is not an op of this trace", site=at)
        if any(not 0 <= j < n for j in node.next) or (node.order is not None and not 0 <= node.order < n):
            raise TraceStructureInvalidError(f"{at}: a node index is out of range", site=at)
        if any(s is not None and any(d < 0 for d in s) for s in node.grad_shapes):
            raise TraceStructureInvalidError(f"{at}: a negative gradient dimension", site=at)
    for label, rows in doc.saved.items():
        if label not in labels:
            raise TraceStructureInvalidError(f"{where}.saved: {label!r} is not an op of this trace", site=where)
        for s in rows:
            if not 0 <= s.bytes <= MAX_BYTES or any(d < 0 for d in s.shape):
                raise TraceStructureInvalidError(f"{where}.saved[{label!r}]: a negative or huge size", site=where)
    if any(x not in labels for x in doc.no_node) or any(a not in modules or c < 0 for a, c in doc.recomputed.items()):
        raise TraceStructureInvalidError(f"{where}: no_node or recomputed names something this trace lacks", site=where)
    if doc.gradients is not None:
        check_grads_doc(doc.gradients, labels, params, f"{where}.gradients")
    return BackwardPass(nodes=doc.nodes, saved=doc.saved, loss=doc.loss, estimate=doc.estimate, no_node=doc.no_node,
                        recomputed=doc.recomputed, notes=doc.notes)

def write_grads(backward: Any, path: Path) -> Any:
    """Write the backward's gradients to `path`; returns the record for trace.json (None: nothing to write)."""
    tensors = {OP + k: v for k, v in backward.grads.items()} | {PARAM + k: v for k, v in backward.param_grads.items()}
    if not tensors:
        return None
    digest = write_values(tensors, path)
    return GradsDoc(GRADS_VERSION, digest, {k: (tuple(v.shape), str(v.dtype).replace("torch.", ""))
                                            for k, v in tensors.items()})


def check_grads_doc(doc: Any, labels: frozenset[str], params: frozenset[str], where: str) -> None:
    """Every key names an op or a parameter of this trace; the version is one this build reads."""
    if doc.version != GRADS_VERSION:
        raise TraceSchemaError(f"{where}: gradients version {doc.version!r} is not supported (this build reads "
                               f"{GRADS_VERSION})", site=where, remedy="Save the trace again with this version.")
    for key, (shape, _) in doc.tensors.items():
        kind, _, name = key.partition(":")
        if not ((kind == "op" and name in labels) or (kind == "param" and name in params)) or any(d < 0 for d in shape):
            raise TraceStructureInvalidError(f"{where}: gradient {key!r} names nothing in this trace", site=where)


def read_grads(folder: Path, doc: Any, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The op-output and parameter gradients of `path`, checked against their digest, shapes and dtypes."""
    if doc is None:
        if path.exists() or path.is_symlink():
            raise TraceFileTamperedError(f"{path} is not recorded in the trace's backward", site=str(path))
        return {}, {}
    if not (path.exists() or path.is_symlink()):
        raise TraceFileCorruptError(f"{path} is missing but the trace records saved gradients", site=str(path))
    from .files import checked_file

    metas = {k: TensorMeta(tuple(shape), dtype, "cpu") for k, (shape, dtype) in doc.tensors.items()}
    values = read_values(checked_file(folder, path), doc.digest, metas)
    if set(values) != set(metas):
        raise TraceFileCorruptError(f"{path} does not hold every gradient the trace records", site=str(path))
    grads = {k[len(OP):]: v for k, v in values.items() if k.startswith(OP)}
    param_grads = {k[len(PARAM):]: v for k, v in values.items() if k.startswith(PARAM)}
    return grads, param_grads
