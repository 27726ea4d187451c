"""values.safetensors, written and read in one pass: the safetensors layout, our own streaming code.

Layout: 8-byte little-endian header length, a JSON header `{label: {dtype, shape, data_offsets}}`
(plus `__metadata__`), then every tensor's bytes back to back. The file is hashed while it is
written and read; reading makes one buffer and views every tensor into it. A value that was a
dense tensor with other than row-major strides (a permuted activation, or a size-1 dimension with an
odd stride) keeps its strides in `__metadata__` (`strides`: JSON `{label: [stride, ...]}`) and is
read back in that layout. Values sharing one storage (a tensor and its views: a q/k/v split, an
eval-mode dropout returning its input) and lone non-dense views (a slice, an expand, a strided step)
are stored once, as the storage span they cover, under one owner's label (values version 2:
`spans` `{owner: length}`, `views` `{label: [owner, offset, [stride, ...]]}`), and read back with
`as_strided` over that span, so they share memory again. A span above
`MAX_SPAN_FACTOR` times its values' size (plus `SPAN_SLACK`) is not stored: those views are stored
dense and listed in `dense_views`. Every value (or span) read starts on an `ALIGN`-byte boundary, as a
fresh storage in the forward did: a run of values the file's buffer would leave unaligned is copied
into an aligned buffer (one copy of those bytes while loading). So an offline replay feeds each kernel
the memory layout it saw in the forward.
"""
from __future__ import annotations

import hashlib
import math
import operator
import os
from collections import Counter
from functools import lru_cache, partial
from itertools import accumulate, groupby, repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Mapping

import msgspec
import torch

from ..errors import (TraceFileCorruptError, TraceFileTamperedError, TraceLimitError, TraceSaveFailedError,
                      TraceSchemaError)
from ..ir import TensorMeta
from ..bounded_io import open_regular, read_fd_capped, sha256_fd
from .files import STORE_READ_ERRORS
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
MAX_STRIDE = 1 << 62  # a recorded stride beyond this is not a layout this writer makes
# The values file's own version (`__metadata__.version`): 1 (absent) dense and permuted values only;
# 2 adds `views` (non-dense views stored as their storage span) and `dense_views`.
VALUES_VERSION = "2"
_READABLE_VERSIONS = frozenset({"1", VALUES_VERSION})
# A non-dense view is stored as its storage span when that holds at most this many elements per
# element of the view, plus SPAN_SLACK (an expand saves one row; a sliced q/k/v about three times).
MAX_SPAN_FACTOR = 4
SPAN_SLACK = 4096


def span_of(shape: Any, strides: Any) -> int:
    """Elements of storage a view of `shape` and `strides` covers from its first element (0 when empty)."""
    if 0 in shape:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def _span_fits(numel: int, span: int) -> bool:
    return span <= MAX_SPAN_FACTOR * numel + SPAN_SLACK


# -- write ------------------------------------------------------------------------------
def write_values(values: Mapping[str, Any], path: Path) -> str:
    """Write `values` (label -> tensor) to `path`; returns the file's SHA-256 (hex).

    Tensors of one dtype and shape are stored next to each other (widest dtype first, so every
    tensor is aligned) and copied out in blocks of about _CHUNK_BYTES, not one by one.
    """
    values = _with_lazy_bits_resolved(values)
    facts = _facts(values)
    stored, spans, views, dense_views = _spans(values, facts)
    groups: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
    for label, value in values.items():
        if label in views:
            if label not in spans:
                continue  # read back from another value's span
            value = stored[label]
            key = (value.dtype, (spans[label],))
        else:
            fact = facts[label]
            key = (fact[0], fact[1])
        groups.setdefault(key, []).append((label, value))
    order = sorted(groups, key=lambda k: (-k[0].itemsize, _NAMES[k[0]], k[1]))
    header: dict[str, Any] = {}
    offset = 0
    for dtype, shape in order:
        name, nbytes, members = _NAMES[dtype], math.prod(shape) * dtype.itemsize, groups[(dtype, shape)]
        end = offset + len(members) * nbytes
        ranges = zip(range(offset, end, nbytes), range(offset + nbytes, end + nbytes, nbytes)) if nbytes else repeat(
            (offset, offset), len(members))
        header.update(zip(map(_FIRST, members), map(partial(_Written, name, shape), ranges)))  # C-level per tensor
        offset = end
    header["__metadata__"] = {"format": FORMAT}
    in_file = [label for label in header if label != "__metadata__"]  # metadata in file order: a resave is identical
    layouts = {}
    if any(_layout(shape, stride) == _KEPT for shape, stride in set(map(_SHAPE_STRIDE, facts.values()))):
        layouts = {label: list(facts[label][2]) for label in in_file
                   if label not in views and _layout(facts[label][1], facts[label][2]) == _KEPT}
    if layouts:
        header["__metadata__"]["strides"] = msgspec.json.encode(layouts).decode()
    if views or dense_views:
        header["__metadata__"]["version"] = VALUES_VERSION
        header["__metadata__"]["spans"] = msgspec.json.encode({k: spans[k] for k in in_file if k in spans}).decode()
        rank = {label: i for i, label in enumerate(in_file)}
        ordered = sorted(views, key=lambda k: (rank[views[k][0]], views[k][1], k))  # not the values' order: a resave is identical
        header["__metadata__"]["views"] = msgspec.json.encode({k: views[k] for k in ordered}).decode()
        header["__metadata__"]["dense_views"] = msgspec.json.encode(sorted(dense_views)).decode()
    head = msgspec.json.encode(header)
    head += b" " * (-len(head) % 8)
    hasher = hashlib.sha256()
    with open(path, "wb") as fh:
        emit(fh, hasher, len(head).to_bytes(8, "little") + head)
        for key in order:
            for block in _blocks([t for _, t in groups[key]], math.prod(key[1]) * key[0].itemsize):
                emit(fh, hasher, block)
    return hasher.hexdigest()


def _with_lazy_bits_resolved(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """`values` with every conjugate or negative view (a bit on the tensor over its base's unchanged storage:
    `x.conj()` of a complex tensor) replaced by its resolved copy: the file holds storage bytes, which
    without the bit are the base's values. `values` itself when none is such a view."""
    lazy = [label for label, v in values.items() if type(v) is torch.Tensor and (v.is_conj() or v.is_neg())]
    if not lazy:
        return values
    resolved = ReadValues(values)
    for name in ("dense_views", "file_storages", "span_owner"):
        if hasattr(values, name):
            setattr(resolved, name, getattr(values, name))
    for label in lazy:
        resolved[label] = values[label].resolve_conj().resolve_neg()
    return resolved


def _facts(values: Mapping[str, Any]) -> dict[str, tuple]:
    """Each value's `(dtype, shape, strides, storage key)` read once (the key None for an empty value);
    refuses a value that cannot be stored."""
    files = set(getattr(values, "file_storages", ()))
    read_from = getattr(values, "span_owner", {})
    facts: dict[str, tuple] = {}
    for label, v in values.items():
        if type(v) is not torch.Tensor or v.is_nested:
            _check_storable(label, v)
            _check_dense_storage(label, v)
        dtype = v.dtype
        if dtype not in _NAMES or v.is_meta:
            _check_storable(label, v)
        shape, stride = tuple(v.shape), v.stride()
        key = None
        if _numel(shape):
            ptr = v.untyped_storage().data_ptr()
            # values read from one file share its buffer: they group as the file grouped them
            key = (ptr, dtype, v.device) if ptr not in files else (read_from.get(label, label),)
        facts[label] = (dtype, shape, stride, key)
    return facts


def _spans(values: Mapping[str, torch.Tensor], facts: Mapping[str, tuple]) -> tuple[dict, dict, dict, list]:
    """Values sharing one storage (a tensor and its views), and lone non-dense views: stored as the storage
    span they cover together. Returns the span tensors and their lengths by owner label, each member's
    `[owner, offset in the span, strides]`, and the views whose span was too large (stored dense)."""
    by_storage: dict[tuple, list[str]] = {}
    for label, (_dtype, _shape, _stride, key) in facts.items():
        if key is not None:
            by_storage.setdefault(key, []).append(label)
    stored: dict[str, torch.Tensor] = {}
    spans: dict[str, int] = {}
    views: dict[str, list] = {}
    dense_views: list[str] = []
    for labels in by_storage.values():
        if len(labels) == 1 and _layout(*facts[labels[0]][1:3]) != _VIEW:
            continue  # a value alone in its storage that tiles it: stored as itself
        members = [values[label] for label in labels]
        lo = min(m.storage_offset() for m in members)
        hi = max(m.storage_offset() + span_of(m.shape, m.stride()) for m in members)
        if _span_fits(sum(m.numel() for m in members), hi - lo):
            groups = [(labels, members, lo, hi)]
        else:  # too far apart to store together: each view on its own span, the rest as themselves
            groups = [([label], [m], m.storage_offset(), m.storage_offset() + span_of(m.shape, m.stride()))
                      for label, m in zip(labels, members) if _layout(*facts[label][1:3]) == _VIEW]
        for group, tensors, start, end in groups:
            if not _span_fits(sum(m.numel() for m in tensors), end - start):
                dense_views += group
                continue
            owner = group[0]
            stored[owner] = tensors[0].as_strided((end - start,), (1,), start)
            spans[owner] = end - start
            for label, m in zip(group, tensors):
                views[label] = [owner, m.storage_offset() - start, list(m.stride())]
    return stored, spans, views, dense_views


@lru_cache(maxsize=4096)
def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


@lru_cache(maxsize=4096)
def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of `shape` (cached: a trace repeats a few shapes over 100,000s of values)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


_PLAIN_LAYOUT, _KEPT, _VIEW = "plain", "kept", "view"


@lru_cache(maxsize=4096)
def _layout(shape: tuple[int, ...], stride: tuple[int, ...]) -> str:
    """How a value of `shape` and `stride` is stored: `_KEPT`, other than row-major strides whose elements
    tile their memory exactly (a permutation of dims, or a size-1 dim with an odd stride: BLAS reads that as
    a transposed operand); `_VIEW`, elements that do not tile their memory (a slice, an expand, a step);
    else `_PLAIN_LAYOUT` (row-major, or too small for its strides to matter)."""
    numel = _numel(shape)
    if numel < 2 or stride == row_major(shape):
        return _PLAIN_LAYOUT
    if 0 not in stride:
        order = sorted(range(len(shape)), key=lambda d: -stride[d])
        if _contiguous([shape[d] for d in order], [stride[d] for d in order]):
            return _KEPT
    return _VIEW


def _contiguous(shape: Any, stride: Any) -> bool:
    """`Tensor.is_contiguous()` of a tensor with this shape and these strides (size-1 dims take any stride)."""
    expected = 1
    for n, s in zip(reversed(shape), reversed(stride)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def _kept_layout(t: torch.Tensor) -> bool:
    """True for a tensor stored in its own non-row-major dense layout (see `_layout`)."""
    return _layout(tuple(t.shape), t.stride()) == _KEPT


def _in_layout(value: torch.Tensor, stride: Any, label: str, site: str) -> torch.Tensor:
    """`value` copied into the recorded strides (refused unless they describe a dense permutation)."""
    if (not isinstance(stride, list) or len(stride) != value.dim()
            or not all(type(s) is int and 0 < s and (s <= value.numel() or n == 1)  # a size-1 dim may have any stride
                       for s, n in zip(stride, value.shape)) or max(stride) > MAX_STRIDE):
        raise TraceFileCorruptError(f"{site}: the recorded strides of {label!r} do not fit its shape", site=site)
    out = torch.empty_strided(tuple(value.shape), tuple(stride), dtype=value.dtype)
    if not _kept_layout(out):
        raise TraceFileCorruptError(f"{site}: the recorded strides of {label!r} are not a dense layout", site=site)
    return out.copy_(value)


def emit(fh: Any, hasher: Any, data: Any) -> None:
    """Write one block and add it to the digest (one function, so a test can stop a save mid-write)."""
    fh.write(data)
    hasher.update(data)


def _check_storable(label: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor) or value.dtype not in _NAMES or value.is_meta:
        raise TraceSaveFailedError(f"the saved value of {label!r} cannot be stored ({type(value).__name__}, "
                                   f"{getattr(value, 'dtype', '?')})", site=label,
                                   remedy=f"Keep values of these dtypes: {', '.join(str(d) for d in _NAMES)}.")


def _check_dense_storage(label: str, value: torch.Tensor) -> None:
    """Refuse a value with no one dense storage to write (a nested tensor, a wrapper subclass)."""
    reason = "a nested tensor" if value.is_nested else None
    if reason is None:
        try:
            value.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError, TypeError):
            reason = f"a {type(value).__name__} (a tensor subclass without a readable storage)"
    if reason is not None:
        raise TraceSaveFailedError(f"the saved value of {label!r} cannot be stored: it is {reason}", site=label,
                                   remedy="Save without values (CaptureOptions(save='none')), or pass plain dense "
                                          "tensors to the forward.")


def _blocks(tensors: list[torch.Tensor], nbytes: int):
    """The bytes of same-dtype, same-shape tensors, flattened together about _CHUNK_BYTES at a time."""
    if nbytes == 0:
        return
    step = max(1, _CHUNK_BYTES // nbytes)
    with torch.no_grad():
        for i in range(0, len(tensors), step):
            flat = torch.stack(tensors[i:i + step]).cpu().contiguous()  # same shapes: one copy, row-major
            flat = flat.as_strided((flat.numel(),), (1,))  # a one-element tensor may carry any stride
            yield memoryview(flat.view(torch.uint8).numpy()).cast("B")


class _Written(msgspec.Struct, gc=False):
    """One header entry as written (encodes as the safetensors object `{dtype, shape, data_offsets}`)."""

    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]


# -- read -------------------------------------------------------------------------------
class _Entry(msgspec.Struct, gc=False):  # no cycles: strings and tuples of ints
    """One header entry (`__metadata__` decodes as an entry with no dtype and is skipped)."""

    dtype: str = ""
    shape: tuple[int, ...] = ()
    data_offsets: tuple[int, int] = (-1, -1)
    strides: str = ""  # `__metadata__` only: JSON {label: [stride, ...]} of values kept non-contiguous
    version: str = ""  # `__metadata__` only: the values version ("" for 1)
    spans: str = ""  # `__metadata__` only: JSON {owner: length} of storage spans stored under an owner's label
    views: str = ""  # `__metadata__` only: JSON {label: [owner, offset, [stride, ...]]} of values read from a span
    dense_views: str = ""  # `__metadata__` only: JSON [label, ...] of views whose span was too large


class ReadValues(dict):
    """The values read from a file (label -> tensor), and which non-dense views it holds dense."""

    dense_views: tuple[str, ...] = ()
    # the buffers read into: their values share a storage only because they share a file
    file_storages: tuple[int, ...] = ()
    span_owner: dict[str, str] = {}  # label -> the owner of the span it was read from


def layout_note(labels: Any) -> str:
    """The trace warning for values whose non-dense layout was not kept."""
    shown = ", ".join(list(labels)[:5]) + (", ..." if len(labels) > 5 else "")
    return (f"{len(labels)} saved value(s) ({shown}) were non-dense views spanning more than {MAX_SPAN_FACTOR}x "
            "their size and are stored dense: an offline replay of the ops that read them may take another "
            "kernel path and differ in the last bits")


def read_values(path: Path, expected_digest: str, metas: Mapping[str, TensorMeta | None]) -> ReadValues:
    """Read, verify and split `path`; every tensor must match its op's recorded shape and dtype."""
    site = str(path)
    buf = _read_verified(path, 8 + MAX_VALUES_HEADER_BYTES + MAX_SPAN_FACTOR * _largest_data(metas)
                         + SPAN_SLACK * 16 * len(metas), expected_digest)
    labels, dtypes, shapes, begins, start, layouts, (spans, views, dense_views) = _entries(buf, site, metas)
    values = ReadValues()
    values.dense_views = tuple(label for label in dense_views if label in metas)
    if not labels:
        return values
    data = torch.frombuffer(buf, dtype=torch.uint8)
    runs = []  # (first index, count, dtype, shape, bytes each, file offset): tensors of one dtype and shape, back to back
    i = 0
    for (dtype, shape), run in groupby(range(len(labels)), key=list(zip(dtypes, shapes)).__getitem__):
        k = len(list(run))
        runs.append((i, k, dtype, shape, math.prod(shape) * dtype.itemsize, start + begins[i]))
        i += k
    aligned = _aligned_copies(data, runs)
    for i, k, dtype, shape, nbytes, offset in runs:
        block = aligned.get(i)
        if block is None:  # aligned already: a view of the file's buffer
            # empty values get their own (empty) storage: a view at an odd offset cannot take a wider dtype
            block = data[offset:offset + k * nbytes] if nbytes else torch.empty(0, dtype=torch.uint8)
        values.update(zip(labels[i:i + k], block.view(dtype).view(k, *shape).unbind(0)))
    for label, stride in layouts.items():
        if label not in values:
            raise TraceFileCorruptError(f"{site}: strides recorded for {label!r}, which has no value", site=site)
        values[label] = _in_layout(values[label], stride, label, site)
    span_of_owner = {owner: values[owner] for owner in spans}
    for label, (owner, offset, stride) in views.items():  # bounds were checked in _entries
        span = span_of_owner[owner]
        values[label] = span.as_strided(metas[label].shape, stride, span.storage_offset() + offset)
    values.file_storages = (data.untyped_storage().data_ptr(),
                            *{t.untyped_storage().data_ptr() for t in aligned.values()})
    values.span_owner = {label: owner for label, (owner, _, _) in views.items()}
    return values


ALIGN = 64  # bytes: torch's CPU allocator starts every new storage here


def _aligned_copies(data: torch.Tensor, runs: list[tuple]) -> dict[int, torch.Tensor]:
    """The runs whose tensors would not start on an ALIGN-byte boundary in the file's buffer, copied into
    one new buffer where each tensor does (a row per tensor, padded): first index -> a (count, bytes) view.

    A forward's values sit in fresh, aligned storages; a kernel may take another path on data that is
    not aligned (MKL's sgemm did on an AMD EPYC machine with AVX-512) and round differently, so a replay of
    an unaligned value would differ from the recorded one in the last bits. Costs one copy of those runs.
    """
    base = data.data_ptr()
    pitches = {i: -(-nbytes // ALIGN) * ALIGN for i, _k, _d, _s, nbytes, offset in runs
               if nbytes and (nbytes % ALIGN or (base + offset) % ALIGN)}
    if not pitches:
        return {}
    into = torch.empty(sum(k * pitches[i] for i, k, *_ in runs if i in pitches) + ALIGN, dtype=torch.uint8)
    cursor = -into.data_ptr() % ALIGN
    copies: dict[int, torch.Tensor] = {}
    for i, k, _dtype, _shape, nbytes, offset in runs:
        pitch = pitches.get(i)
        if pitch is None:
            continue
        rows = into[cursor:cursor + k * pitch].view(k, pitch)[:, :nbytes]
        rows.copy_(data[offset:offset + k * nbytes].view(k, nbytes))
        copies[i] = rows
        cursor += k * pitch
    return copies


def _largest_data(metas: Mapping[str, TensorMeta | None]) -> int:
    """Bytes of every recorded op output together: no values file of this trace can hold more data."""
    itemsize = {text: dtype.itemsize for dtype, text in _DTYPE_TEXT.items()}
    recorded = list(filter(_NOT_NONE, metas.values()))
    shapes = Counter(zip(map(_SHAPE, recorded), map(_DTYPE, recorded)))
    return sum(math.prod(shape) * itemsize.get(dtype, 0) * n for (shape, dtype), n in shapes.items())


PREHASH_BYTES = 64 << 20  # a values file past this is digested in streaming before its buffer is made


def _read_verified(path: Path, limit: int, expected_digest: str) -> bytearray:
    """The values file's bytes, refused typed (before a buffer of its size is made) when it holds more than
    `limit` bytes, more than this machine's memory, or bytes that do not match `expected_digest`."""
    fd = open_regular(path, STORE_READ_ERRORS)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise TraceLimitError(f"{path} holds {size:,} bytes, more than the trace's recorded outputs "
                                  f"({limit:,})", site=str(path))
        if size > PREHASH_BYTES:  # a large file: a look at its framing, its digest in blocks, then one buffer
            _check_framing(fd, size, path)
            digest, size = sha256_fd(fd, path, STORE_READ_ERRORS, limit=limit)
            if digest != expected_digest:
                raise TraceFileTamperedError(f"{path} does not match its digest", site=str(path))
            if size > _memory_bytes():
                raise TraceLimitError(f"{path} ({size:,} bytes) is larger than this machine's memory", site=str(path))
            buf = read_fd_capped(fd, size, path, STORE_READ_ERRORS)
            if len(buf) != size:
                raise TraceFileCorruptError(f"{path} changed while it was read", site=str(path))
            return buf
        buf = read_fd_capped(fd, limit, path, STORE_READ_ERRORS)
    finally:
        os.close(fd)
    if hashlib.sha256(buf).hexdigest() != expected_digest:
        raise TraceFileTamperedError(f"{path} does not match its digest", site=str(path))
    return buf


def _check_framing(fd: int, size: int, path: Path) -> None:
    """Refuse at once a file whose first bytes cannot open a safetensors file (a header length past the
    bound or the file, a header that is not a JSON object): no digest of gigabytes of garbage."""
    head = os.pread(fd, 9, 0)
    n = int.from_bytes(head[:8], "little") if len(head) == 9 else -1
    if not (0 < n <= MAX_VALUES_HEADER_BYTES and 8 + n <= size and head[8:9] == b"{"):
        raise TraceFileCorruptError(f"{path} does not start as a safetensors file (header length {n:,})",
                                    site=str(path))


def _memory_bytes() -> int:
    """Physical memory of this machine in bytes (unbounded where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def _entries(buf: bytearray, site: str,
             metas: Mapping[str, TensorMeta | None]) -> tuple[list, list, list, list, int, dict[str, Any]]:
    """Labels, dtypes, shapes and begin offsets of the tensors in file order, where the data starts, and
    the recorded strides of values kept in a non-contiguous layout.

    Each entry must name an op with the same shape and dtype, and the byte ranges must cover the data
    back to back (checked column by column, then entry by entry only to name an offender).
    """
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
    meta = header.pop("__metadata__", None)
    layouts = _recorded_layouts(meta.strides if meta is not None else "", site)
    spans, views, dense_views = _recorded_views(meta, site, metas)
    labels, entries = list(header), list(header.values())
    begins = list(map(_FIRST, map(_OFFSETS, entries)))
    if begins != sorted(begins):  # our writer lists tensors in file order; another writer may not
        order = sorted(range(len(begins)), key=begins.__getitem__)
        labels, entries = list(map(labels.__getitem__, order)), list(map(entries.__getitem__, order))
    found = list(map(metas.get, labels))
    dtypes = list(map(DTYPES.get, map(_DTYPE, entries)))
    offsets = list(map(_OFFSETS, entries))
    missing = any(map(_IS_NONE, found))
    stored = [] if missing else list(map(_SHAPE, found)) if not spans else [
        (spans[label],) if label in spans else m.shape for label, m in zip(labels, found)]
    extra = (set(spans) - set(labels)) | (set(views) - set(spans)) & set(labels)
    if extra:
        raise TraceFileCorruptError(f"{site}: {sorted(extra)[0]!r} is recorded both as a span and not (or its span "
                                    "is missing)", site=site)
    if (missing or list(map(_DTYPE_TEXT.get, dtypes)) != list(map(_DTYPE, found))
            or list(map(_SHAPE, entries)) != stored):
        bad = next(label for label, spec, meta in zip(labels, entries, found)
                   if meta is None or spec.shape != ((spans[label],) if label in spans else meta.shape)
                   or _DTYPE_TEXT.get(DTYPES.get(spec.dtype)) != meta.dtype)
        raise TraceFileCorruptError(f"the saved value of {bad!r} disagrees with its recorded shape/dtype (or there "
                                    f"is no such op)", site=site)
    kinds = list(zip(map(_SHAPE, entries), dtypes))
    nbytes = {kind: math.prod(kind[0]) * kind[1].itemsize for kind in set(kinds)}
    ends = list(accumulate(map(nbytes.__getitem__, kinds)))  # where each tensor ends when all follow back to back
    expected = [0, *ends[:-1]]
    if (list(map(_FIRST, offsets)) != expected or list(map(_SECOND, offsets)) != ends
            or (ends[-1] if ends else 0) != len(buf) - 8 - n):
        for label, (b, e), want_b, want_e in zip(labels, offsets, expected, ends):
            if (b, e) != (want_b, want_e):
                raise TraceFileCorruptError(f"{site}: the byte range of {label!r} does not fit its shape or does not "
                                            f"follow the previous tensor's", site=site)
        raise TraceFileCorruptError(f"{site}: the tensors do not cover the {len(buf) - 8 - n:,} data bytes", site=site)
    return labels, dtypes, stored, expected, 8 + n, layouts, (spans, views, dense_views)


def _recorded_views(meta: Any, site: str, metas: Mapping[str, TensorMeta | None]) -> tuple[dict, dict, list]:
    """Spans (owner -> length), the values read from them (label -> (owner, offset, strides)), checked
    against the recorded shapes and dtypes, and the views stored dense."""
    if meta is None or not (meta.version or meta.spans or meta.views or meta.dense_views):
        return {}, {}, []
    if meta.version not in _READABLE_VERSIONS:
        raise TraceSchemaError(f"{site} has values version {meta.version!r}, which this build cannot read "
                               f"(it reads {', '.join(sorted(_READABLE_VERSIONS))})", site=site,
                               remedy="Load it with the build that saved it, or save the trace again.")
    try:
        spans = msgspec.json.decode(meta.spans or "{}", type=dict[str, int])
        views = msgspec.json.decode(meta.views or "{}", type=dict[str, tuple[str, int, list[int]]])
        dense_views = msgspec.json.decode(meta.dense_views or "[]", type=list[str])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceFileCorruptError(f"{site} has unreadable views metadata ({exc})", site=site) from None
    members: dict[str, int] = dict.fromkeys(spans, 0)
    for label, (owner, offset, stride) in views.items():
        m, o = metas.get(label), metas.get(owner)
        if (m is None or o is None or owner not in spans or m.dtype != o.dtype or len(stride) != len(m.shape)
                or any(s < 0 or s > MAX_STRIDE for s in stride) or not 0 <= offset <= spans[owner]
                or offset + span_of(m.shape, stride) > spans[owner]):
            raise TraceFileCorruptError(f"{site}: the recorded view of {label!r} does not fit its shape or its span",
                                        site=site)
        members[owner] += math.prod(m.shape)
    for owner, length in spans.items():
        if owner not in views or views[owner][0] != owner or not 0 < length or not _span_fits(members[owner], length):
            raise TraceFileCorruptError(f"{site}: the span stored under {owner!r} ({length:,} elements) is not one "
                                        "its views need", site=site)
    return spans, {label: (owner, offset, stride) for label, (owner, offset, stride) in views.items()}, dense_views


def _recorded_layouts(text: str, site: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        layouts = msgspec.json.decode(text, type=dict[str, list[int]])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceFileCorruptError(f"{site} has unreadable strides metadata ({exc})", site=site) from None
    return layouts


_DTYPE, _SHAPE, _OFFSETS, _FIRST, _SECOND = (attrgetter("dtype"), attrgetter("shape"), attrgetter("data_offsets"),
                                             itemgetter(0), itemgetter(1))
_IS_NONE, _NOT_NONE = partial(operator.is_, None), partial(operator.is_not, None)
_SHAPE_STRIDE = itemgetter(1, 2)  # of a value's facts
