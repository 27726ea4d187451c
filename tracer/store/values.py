"""values.safetensors, written and read in one pass: the safetensors layout, our own streaming code.

Layout: 8-byte little-endian header length, a JSON header `{label: {dtype, shape, data_offsets}}`
(plus `__metadata__`), then every tensor's bytes back to back. The file is hashed while it is
written and read; reading makes one buffer and views every tensor into it.
"""
from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any, Mapping

import msgspec
import torch
from torch._utils import _flatten_dense_tensors

from ..errors import TraceFileCorruptError, TraceFileTamperedError, TraceLimitError, TraceSaveFailedError
from ..ir import TensorMeta
from .format import FORMAT, MAX_VALUES_HEADER_BYTES

DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16,
    "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64, "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2, "C64": torch.complex64,
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_DTYPE_TEXT = {dtype: str(dtype).replace("torch.", "") for dtype in _NAMES}  # as TensorMeta.dtype writes it
_CHUNK_BYTES = 64 << 20


# -- write ------------------------------------------------------------------------------
def write_values(values: Mapping[str, Any], path: Path) -> str:
    """Write `values` (label -> tensor) to `path`; returns the file's SHA-256 (hex).

    Tensors of one dtype and shape are stored next to each other (widest dtype first, so every
    tensor is aligned) and copied out in blocks of about _CHUNK_BYTES, not one by one.
    """
    groups: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
    for label, value in values.items():
        _check_storable(label, value)
        groups.setdefault((value.dtype, tuple(value.shape)), []).append((label, value))
    order = sorted(groups, key=lambda k: (-k[0].itemsize, _NAMES[k[0]], k[1]))
    header: dict[str, Any] = {}
    offset = 0
    for dtype, shape in order:
        name, nbytes = _NAMES[dtype], math.prod(shape) * dtype.itemsize
        for label, _ in groups[(dtype, shape)]:
            header[label] = {"dtype": name, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
    header["__metadata__"] = {"format": FORMAT}
    head = msgspec.json.encode(header)
    head += b" " * (-len(head) % 8)
    hasher = hashlib.sha256()
    with open(path, "wb") as fh:
        emit(fh, hasher, len(head).to_bytes(8, "little") + head)
        for key in order:
            for block in _blocks([t for _, t in groups[key]], math.prod(key[1]) * key[0].itemsize):
                emit(fh, hasher, block)
    return hasher.hexdigest()


def emit(fh: Any, hasher: Any, data: Any) -> None:
    """Write one block and add it to the digest (one function, so a test can stop a save mid-write)."""
    fh.write(data)
    hasher.update(data)


def _check_storable(label: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor) or value.dtype not in _NAMES or value.is_meta:
        raise TraceSaveFailedError(f"the saved value of {label!r} cannot be stored ({type(value).__name__}, "
                                   f"{getattr(value, 'dtype', '?')})", site=label,
                                   remedy=f"Keep values of these dtypes: {', '.join(str(d) for d in _NAMES)}.")


def _blocks(tensors: list[torch.Tensor], nbytes: int):
    """The bytes of same-dtype, same-shape tensors, flattened together about _CHUNK_BYTES at a time."""
    if nbytes == 0:
        return
    step = max(1, _CHUNK_BYTES // nbytes)
    with torch.no_grad():
        for i in range(0, len(tensors), step):
            flat = _flatten_dense_tensors(tensors[i:i + step]).cpu()
            yield memoryview(flat.view(torch.uint8).numpy()).cast("B")


# -- read -------------------------------------------------------------------------------
class _Entry(msgspec.Struct):
    """One header entry (`__metadata__` decodes as an entry with no dtype and is skipped)."""

    dtype: str = ""
    shape: tuple[int, ...] = ()
    data_offsets: tuple[int, int] = (-1, -1)


def read_values(path: Path, expected_digest: str, metas: Mapping[str, TensorMeta | None]) -> dict[str, torch.Tensor]:
    """Read, verify and split `path`; every tensor must match its op's recorded shape and dtype."""
    site = str(path)
    buf = _read_all(path)
    if hashlib.sha256(buf).hexdigest() != expected_digest:
        raise TraceFileTamperedError(f"{path} does not match its digest", site=site)
    entries, start = _entries(buf, site, metas)
    if not entries:
        return {}
    data = torch.frombuffer(buf, dtype=torch.uint8)
    values: dict[str, torch.Tensor] = {}
    i = 0
    while i < len(entries):
        j = _run_end(entries, i)
        b, _, _, dtype, shape = entries[i]
        block = data[start + b:start + entries[j - 1][1]]
        if (start + b) % dtype.itemsize:
            block = block.clone()  # a tensor not aligned to its dtype (another writer's file)
        for (_, _, label, _, _), t in zip(entries[i:j], block.view(dtype).view(j - i, *shape).unbind(0)):
            values[label] = t
        i = j
    return values


def _run_end(entries: list, i: int) -> int:
    """End of the run of tensors from `i` that share dtype and shape (read as one block)."""
    _, _, _, dtype, shape = entries[i]
    j = i + 1
    while j < len(entries) and entries[j][3] is dtype and entries[j][4] == shape:
        j += 1
    return j


def _read_all(path: Path) -> bytearray:
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            buf = bytearray(size)
            if fh.readinto(buf) != size:
                raise OSError("short read")
    except OSError as exc:
        raise TraceFileCorruptError(f"{path} cannot be read ({exc})", site=str(path)) from None
    return buf


def _entries(buf: bytearray, site: str, metas: Mapping[str, TensorMeta | None]) -> tuple[list, int]:
    """(begin, end, label, dtype, shape) per tensor, sorted by offset, covering the data with no gap."""
    if len(buf) < 8:
        raise TraceFileCorruptError(f"{site} is too short for a safetensors file", site=site)
    n = int.from_bytes(buf[:8], "little")
    if n > MAX_VALUES_HEADER_BYTES:
        raise TraceLimitError(f"{site} declares a {n:,}-byte header", site=site)
    if 8 + n > len(buf):
        raise TraceFileCorruptError(f"{site} is truncated inside its header", site=site)
    try:
        header = msgspec.json.decode(memoryview(buf)[8:8 + n], type=dict[str, _Entry])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise TraceFileCorruptError(f"{site} has an unreadable header ({exc})", site=site) from None
    header.pop("__metadata__", None)
    entries = []
    for label, spec in header.items():
        dtype, meta = DTYPES.get(spec.dtype), metas.get(label)
        if meta is None or dtype is None or spec.shape != meta.shape or _DTYPE_TEXT[dtype] != meta.dtype:
            raise TraceFileCorruptError(f"the saved value of {label!r} disagrees with its recorded shape/dtype "
                                        f"(or there is no such op)", site=site)
        b, e = spec.data_offsets
        if b < 0 or e - b != math.prod(meta.shape) * dtype.itemsize:
            raise TraceFileCorruptError(f"{site}: the byte range of {label!r} does not fit its shape", site=site)
        entries.append((b, e, label, dtype, meta.shape))
    entries.sort(key=lambda x: (x[0], x[1]))
    end = 0
    for b, e, label, _, _ in entries:
        if b != end:
            raise TraceFileCorruptError(f"{site}: the bytes of {label!r} do not follow the previous tensor's", site=site)
        end = e
    if end != len(buf) - 8 - n:
        raise TraceFileCorruptError(f"{site}: the tensors cover {end:,} of {len(buf) - 8 - n:,} data bytes", site=site)
    return entries, 8 + n
