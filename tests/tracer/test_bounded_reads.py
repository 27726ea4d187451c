"""Bounded reads (tracer.bounded_io) and the store's use of them; typed answers to the issue-39 escapes."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tracemalloc
import zlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracer
from tracer import bounded_io
from tracer.errors import (InputNotRegularFileError, InputTooLargeError, InputUnreadableError, TraceFileCorruptError,
                           TraceFileTamperedError, TraceFileUnsafeError, TraceLimitError)
from tracer.estimates import op_flops, trace_totals
from tracer.ir import TensorMeta
from tracer.store import values as store_values
from tracer.store.document import frame
from tests.models import tiny_gpt2


def test_read_capped_reads_what_st_size_hides_and_refuses_one_byte_more(tmp_path):
    """/proc files report st_size 0; the cap holds on what is actually read."""
    status = Path("/proc/self/status")
    assert os.stat(status).st_size == 0
    text = bounded_io.read_capped(status, 1 << 20)
    assert b"Pid:" in text
    with pytest.raises(InputTooLargeError):
        bounded_io.read_capped(status, 16)
    exact = tmp_path / "exact.bin"
    exact.write_bytes(b"x" * 100)
    assert bytes(bounded_io.read_capped(exact, 100)) == b"x" * 100
    with pytest.raises(InputTooLargeError):
        bounded_io.read_capped(exact, 99)


def test_fifo_device_and_links_to_them_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # no writer: a plain open() would block forever
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero, Path("/dev/zero"), tmp_path):
        with pytest.raises(InputNotRegularFileError):
            bounded_io.read_capped(path, 1 << 20)
    with pytest.raises(InputUnreadableError):
        bounded_io.read_capped(tmp_path / "missing.json", 10)


def _zeros_gz(path: Path, nbytes: int) -> None:
    """A gzip file of `nbytes` zeros, written in streaming (a few hundred KB for hundreds of MB)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    with open(path, "wb") as fh:
        for _ in range(nbytes >> 20):
            fh.write(comp.compress(block))
        fh.write(comp.flush())


def test_a_gzip_bomb_is_refused_after_bounded_work(tmp_path):
    """A trace.json.gz of 256 MiB zeros (~250 KB) is refused typed, holding at most the inflate floor."""
    folder = tmp_path / "bomb"
    folder.mkdir()
    _zeros_gz(folder / "trace.json.gz", 256 << 20)
    assert (folder / "trace.json.gz").stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(TraceLimitError, match="compressed size"):
            tracer.load(folder)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * bounded_io.INFLATE_FLOOR  # not the 256 MiB it inflates to


def test_inflate_capped_reads_members_and_refuses_truncation(tmp_path):
    import gzip

    whole = tmp_path / "two.gz"
    whole.write_bytes(gzip.compress(b"abc") + gzip.compress(b"def"))
    fd = os.open(whole, os.O_RDONLY)
    try:
        assert bytes(bounded_io.inflate_capped(fd, 100, whole)) == b"abcdef"
    finally:
        os.close(fd)
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(b"x" * 1000)[:-12])
    fd = os.open(cut, os.O_RDONLY)
    try:
        with pytest.raises(InputUnreadableError):
            bounded_io.inflate_capped(fd, 10_000, cut)
    finally:
        os.close(fd)


def test_a_large_values_file_is_digested_before_its_buffer_is_made(tmp_path):
    """A sparse values file past PREHASH_BYTES: refused typed with no buffer of its size, at once when its
    first bytes are not safetensors framing, after a streaming digest when they are."""
    sparse = tmp_path / "values.safetensors"
    with open(sparse, "wb") as fh:
        fh.truncate(store_values.PREHASH_BYTES + (64 << 20))
    framed = tmp_path / "framed.safetensors"
    with open(framed, "wb") as fh:
        fh.write((2).to_bytes(8, "little") + b"{}")
        fh.truncate(store_values.PREHASH_BYTES + (64 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(TraceFileCorruptError, match="does not start as a safetensors file"):
            store_values._read_verified(sparse, 1 << 40, "0" * 64)
        with pytest.raises(TraceFileTamperedError):
            store_values._read_verified(framed, 1 << 40, "0" * 64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


@pytest.fixture(scope="module")
def gpt2_saved(tmp_path_factory):
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0))
    trace = tracer.trace(tiny_gpt2(), (ids,))
    return trace, trace.save(tmp_path_factory.mktemp("base") / "gpt2")


@pytest.mark.parametrize("pad", [1, 3, 5])
def test_a_values_header_padded_with_whitespace_loads_the_same_values(gpt2_saved, tmp_path, pad):
    """safetensors allows trailing header whitespace; data then starts at an odd offset (was a RuntimeError)."""
    trace, folder = gpt2_saved
    raw = (folder / "values.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    head = raw[8:8 + n] + b"\t" * pad
    padded = len(head).to_bytes(8, "little") + head + raw[8 + n:]
    out = tmp_path / "padded"
    out.mkdir()
    (out / "values.safetensors").write_bytes(padded)
    body = json.loads((folder / "trace.json").read_bytes())["trace"]
    (out / "trace.json").write_bytes(frame(json.dumps(body, separators=(",", ":")).encode(),
                                           hashlib.sha256(padded).hexdigest()))
    loaded = tracer.load(out)
    assert set(loaded.values) == set(trace.values)
    for label, value in trace.values.items():
        assert torch.equal(loaded.values[label], value), label


def test_values_file_that_is_a_fifo_is_refused(gpt2_saved, tmp_path):
    _, folder = gpt2_saved
    out = tmp_path / "fifo"
    out.mkdir()
    (out / "trace.json").write_bytes((folder / "trace.json").read_bytes())
    os.mkfifo(out / "values.safetensors")
    with pytest.raises(TraceFileUnsafeError):
        tracer.load(out)


class Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def test_op_flops_of_an_sdpa_recorded_with_0d_key_or_output():
    """An SDPA op whose key or output is recorded 0-d (a hostile trace) counts as elementwise, not IndexError."""
    q = k = v = torch.randn(1, 2, 4, 8)
    trace = tracer.trace(Attention(), (q, k, v))
    sdpa = next(op for op in trace.ops if op.kind == "scaled_dot_product_attention")
    assert op_flops(sdpa, trace) > sdpa.out.numel  # the attention formula applies to real shapes
    key = trace[sdpa.parents[1].source]
    flat = TensorMeta((), key.out.dtype, key.out.device)
    for changed in ({key.label: dataclasses.replace(key, out=flat)},
                    {sdpa.label: dataclasses.replace(sdpa, out=dataclasses.replace(sdpa.out, shape=()))}):
        ops = tuple(changed.get(op.label, op) for op in trace.ops)
        hostile = tracer.Trace(ops=ops, modules=dict(trace.modules), params=dict(trace.params),
                               model_class=trace.model_class)
        op = hostile[sdpa.label]
        assert op_flops(op, hostile) == op.out.numel
        assert trace_totals(hostile)["flops_estimate"] >= 0
