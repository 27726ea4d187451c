"""grads.safetensors: a backward's op-output and parameter gradients, beside values.safetensors.

Keys are `op:LABEL` (the gradient of op LABEL's first output, per the save_grads policy) and
`param:ADDRESS` (the parameter's `.grad` after the backward). The backward's record in trace.json
(itself under the structure digest) carries the file's version, SHA-256 and every key's shape and
dtype; a load checks all of them and refuses typed (a trace saved before this file existed loads
with no gradients, as it did).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TraceFileCorruptError, TraceFileTamperedError, TraceSchemaError, TraceStructureInvalidError
from ..ir import TensorMeta
from .values import read_values, write_values

GRADS_VERSION = 1
OP, PARAM = "op:", "param:"


def write_grads(backward: Any, path: Path) -> Any:
    """Write the backward's gradients to `path`; returns the record for trace.json (None: nothing to write)."""
    from ..backward.document import GradsDoc

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
