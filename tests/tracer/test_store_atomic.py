"""Atomic save: a sibling temporary folder swapped in; the previous trace survives a kill mid-write;
unrelated files are never replaced or deleted; bad targets refuse typed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer import errors
from tracer.store import STRUCTURE_FILE, VALUES_FILE, save_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def traces():
    m = tiny_gpt2()
    a = tracer.trace(m, (torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0)),))
    b = tracer.trace(m, (torch.randint(0, 100, (1, 4), generator=torch.Generator().manual_seed(1)),),
                     capture=tracer.CaptureOptions(save="none"))
    return a, b


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name != folder.name)


def test_overwrite_swaps_whole_folders(traces, tmp_path):
    a, b = traces
    folder = a.save(tmp_path / "t")
    assert b.save(folder) == folder
    assert sorted(os.listdir(folder)) == [STRUCTURE_FILE]  # b has no values: a's values file went with a's folder
    assert tracer.load(folder).ops == b.ops
    assert _siblings(folder) == []  # no temporary folder left behind
    a.save(folder)
    assert tracer.load(folder).ops == a.ops and sorted(os.listdir(folder)) == [STRUCTURE_FILE, VALUES_FILE]
    save_trace(b, folder, compress=True)  # a compressed save replaces the plain structure file
    assert sorted(os.listdir(folder)) == ["trace.json.gz"] and tracer.load(folder).ops == b.ops


def test_swap_without_renameat2_falls_back_to_two_renames(traces, tmp_path, monkeypatch):
    from tracer.store import save as save_module

    a, b = traces
    folder = a.save(tmp_path / "t")
    monkeypatch.setattr(save_module, "_exchange", lambda x, y: False)
    b.save(folder)
    assert tracer.load(folder).ops == b.ops and _siblings(folder) == []


def test_unrelated_files_are_never_replaced(traces, tmp_path):
    a, _ = traces
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / VALUES_FILE).write_bytes(b"not ours")
    with pytest.raises(errors.TraceSavePathError) as e:
        a.save(tmp_path / "dir" / "x.json")  # a file name is not a trace folder
    assert e.value.code == "trace_save_path_invalid"
    with pytest.raises(errors.TraceSavePathError):
        a.save(tmp_path / "dir" / STRUCTURE_FILE)  # the folder holds something else: left alone
    with pytest.raises(errors.TraceSavePathError):
        a.save(tmp_path / "dir")
    assert (tmp_path / "dir" / VALUES_FILE).read_bytes() == b"not ours"
    assert sorted(os.listdir(tmp_path / "dir")) == [VALUES_FILE]
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "notes.txt").write_text("mine")
    with pytest.raises(errors.TraceSavePathError, match="notes.txt"):
        a.save(tmp_path / "mixed")
    assert os.listdir(tmp_path / "mixed") == ["notes.txt"]


def test_existing_files_and_bad_paths_refuse(traces, tmp_path):
    a, _ = traces
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "file" / "below", tmp_path / "t.safetensors", None, 7, "a\x00b"):
        with pytest.raises(errors.TraceSavePathError):
            a.save(bad)
    assert (tmp_path / "file").read_text() == "x"
    (tmp_path / "empty").mkdir()
    assert tracer.load(a.save(tmp_path / "empty")).ops == a.ops  # an empty folder is a fine target


def test_failure_mid_save_changes_nothing(traces, tmp_path, monkeypatch):
    from tracer.store import values as values_module

    a, b = traces
    folder = a.save(tmp_path / "t")
    before = {n: (folder / n).read_bytes() for n in os.listdir(folder)}

    def full_disk(fh, hasher, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(values_module, "emit", full_disk)
    with pytest.raises(errors.TraceSaveFailedError) as e:
        a.save(folder)
    assert "nothing was changed" in e.value.message
    assert {n: (folder / n).read_bytes() for n in os.listdir(folder)} == before
    assert _siblings(folder) == []
    with pytest.raises(errors.TraceSaveFailedError):
        a.save(tmp_path / "new")
    assert not (tmp_path / "new").exists() and _siblings(folder) == []


CHILD = textwrap.dedent("""
    import sys, time, torch
    sys.path.insert(0, {root!r})
    import tracer
    from tracer.store import values
    from tests.models import tiny_gpt2

    real_emit = values.emit
    calls = []

    def emit_then_hang(fh, hasher, data):
        real_emit(fh, hasher, data)
        fh.flush()
        calls.append(1)
        if len(calls) == 2:  # the header and one data block are on disk
            print("MID-WRITE", flush=True)
            time.sleep(600)

    values.emit = emit_then_hang
    values._CHUNK_BYTES = 4096
    t = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 9)),))
    t.save({folder!r})
""")


def test_killed_mid_write_keeps_the_previous_trace(traces, tmp_path):
    """A real SIGKILL while the values file is half written: the old trace loads intact, the target holds only
    its own files, and the next save removes the dead process's temporary folder."""
    a, b = traces
    folder = a.save(tmp_path / "t")
    before = {n: (folder / n).read_bytes() for n in os.listdir(folder)}
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), folder=str(folder))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "MID-WRITE", child.stderr.read()
        leftovers = _siblings(folder)
        assert len(leftovers) == 1 and leftovers[0].startswith(f".t.saving-{child.pid}-")
        assert (tmp_path / leftovers[0] / VALUES_FILE).stat().st_size > 0  # really half-way through
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    assert {n: (folder / n).read_bytes() for n in os.listdir(folder)} == before
    assert tracer.load(folder).ops == a.ops
    b.save(folder)  # the next save to this target sweeps the dead writer's temporary folder
    assert _siblings(folder) == [] and tracer.load(folder).ops == b.ops
