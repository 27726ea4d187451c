"""A build that does not fit its sources falls back to the capture's Python path with one warning.

Each case is made for real in a copy of the package (`tracer/`) in a temporary folder, imported in a fresh
process ahead of the editable install: a `.c` edited after the build (stale), the session's record layout
given a field the C does not fill (layout), no extension built at all (missing). Each must import without
an ImportError, say why once with a `KernelFallbackWarning` naming `pip install -e .`, turn the C entry points
off, and capture what the C kernel captures.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import torch
from torch import nn

import tracer
from tests.tracer._safe_build_capture import report
from tracer.capture import hotpath, source_digest
from tracer.capture.kernel import contract

ROOT = Path(__file__).resolve().parents[2]
needs_extension = pytest.mark.skipif(not hotpath.ACTIVE, reason="the C extension is not built in this environment")

# In a fresh process: import the package found first on sys.path, capture, print what it saw as JSON.
_SCRIPT = "import json; from tests.tracer._safe_build_capture import report; print(json.dumps(report()))"


def _run(folder: Path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in (hotpath.ENV_PURE_PYTHON, hotpath.ENV_KERNEL)}
    environ.update(env, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))  # the copy's tracer, this tests/
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=folder, env=environ, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]  # no ImportError, no failed capture
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).resolve() == (folder / "tracer" / "__init__.py").resolve()  # the copy, not the install
    return out


def _copy(tmp_path: Path, *, built: bool = True) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", *(() if built else ("*.so", "*.pyd")))
    shutil.copytree(ROOT / "tracer", tmp_path / "tracer", ignore=ignore)
    return tmp_path


@pytest.fixture(scope="module")
def with_c() -> dict:
    """The capture in this process, with the C kernel (a process that chose the Python kernel has none)."""
    if hotpath.kernel() == "python":
        pytest.skip("this process runs the Python kernel (TORCHLENS_EXPLORE_KERNEL / _PURE_PYTHON): no C reference")
    out = report()
    assert out["active"] and out["c_pieces"] == {"session": [True] * 4, "build": [True] * 4}
    return out


def _assert_fell_back(out: dict, reason: str, with_c: dict) -> None:
    fallbacks = [w for w in out["warnings"] if w[0] == "KernelFallbackWarning"]
    assert len(fallbacks) == 1 and len(out["warnings"]) == 1, out["warnings"]
    assert fallbacks[0][1] == reason
    assert "pip install -e ." in fallbacks[0][2]
    assert not out["active"]
    assert out["c_pieces"] == {"session": [False] * 4, "build": [False] * 4}
    assert out["trace"] == with_c["trace"] and out["values"] == with_c["values"]


@needs_extension
def test_sources_edited_after_the_build_fall_back_to_python(tmp_path, with_c):
    folder = _copy(tmp_path)
    capture = folder / "tracer" / "capture"
    for name in ("_walk.c", "_slots.h"):  # a comment in one extension's .c; the header the other two include
        (capture / name).write_text("/* edited after the build */\n" + (capture / name).read_text())
    out = _run(folder)
    _assert_fell_back(out, "stale", with_c)
    assert all(f"{name} was built from other sources" in out["warnings"][0][2] for name in ("_walk", "_hotpath", "_assembly"))


def _edit_contract(folder: Path, old: str, new: str) -> None:
    contract = folder / "tracer" / "capture" / "kernel" / "contract.py"
    text = contract.read_text()
    assert text.count(old) == 1
    contract.write_text(text.replace(old, new))


_SITE_LINE = '    "site",      # the user\'s (code, offset) source site, shared, or None\n'
_IO_LINE = '    "io",        # an input/output path for synthetic io ops, else ""\n'


@needs_extension
def test_a_record_layout_the_c_does_not_fill_falls_back_to_python(tmp_path, with_c):
    """A record field the C does not know (added to the contract's RECORD_FIELDS, as a change of the capture's
    semantics would add one): the C kernel's configure refuses it and the Python kernel runs, with one warning."""
    folder = _copy(tmp_path)
    _edit_contract(folder, _IO_LINE, _IO_LINE + '    "extra",\n')
    out = _run(folder)
    _assert_fell_back(out, "layout", with_c)
    assert "record of 16 named fields" in out["warnings"][0][2]


@needs_extension
def test_the_c_reads_the_record_positions_from_the_contract(tmp_path, with_c):
    """The record's field order is defined once (kernel/contract.py): moved there, the C fills the new
    positions (no warning, the C kernel on) and the capture is the same."""
    folder = _copy(tmp_path)
    _edit_contract(folder, _SITE_LINE + _IO_LINE, _IO_LINE + _SITE_LINE)
    out = _run(folder)
    assert out["warnings"] == [] and out["active"]
    assert out["c_pieces"] == {"session": [True] * 4, "build": [True] * 4}
    assert out["trace"] == with_c["trace"] and out["values"] == with_c["values"]


def test_no_extension_built_falls_back_to_python(tmp_path, with_c):
    folder = _copy(tmp_path, built=False)
    assert not list((folder / "tracer" / "capture").glob("_*.so"))
    _assert_fell_back(_run(folder), "missing", with_c)


def test_the_python_kernel_chosen_for_a_process_says_nothing(tmp_path, with_c):
    out = _run(_copy(tmp_path), **{hotpath.ENV_KERNEL: "python"})  # (TORCHLENS_EXPLORE_PURE_PYTHON: test_hotpath.py)
    assert out["warnings"] == [] and not out["active"]
    assert out["c_pieces"] == {"session": [False] * 4, "build": [False] * 4}
    assert out["trace"] == with_c["trace"] and out["values"] == with_c["values"]


@needs_extension
def test_a_contract_the_c_cannot_read_is_refused_by_name():
    """configure refuses (ValueError, what `native.configure` turns into the layout fallback) a record without a
    field the C fills and a state slot that is not the one the C reads, naming it; nothing is changed."""
    fields = tuple("where" if f == "site" else f for f in contract.RECORD_FIELDS)
    with pytest.raises(ValueError, match="no field 'site'"):
        hotpath._asm.configure_records(fields)

    class Renamed:
        __slots__ = tuple("counter" if f == "call_counter" else f for f in contract.STATE_FIELDS)

    with pytest.raises(ValueError, match="'counter'; the C kernel reads 'call_counter'"):
        hotpath._ext.configure_state(Renamed, tuple(Renamed.__dict__[n] for n in Renamed.__slots__),
                                     contract.GuardFastPath, contract.guard_fast_descriptors())
    assert tracer.trace(nn.Linear(2, 2), (torch.randn(1, 2),)).ops  # still configured as before


@needs_extension
def test_each_built_extension_carries_the_digest_of_its_sources():
    folder = ROOT / "tracer" / "capture"
    for name, mod in (("_hotpath", hotpath._ext), ("_assembly", hotpath._asm), ("_walk", hotpath._walk)):
        assert mod.SOURCE_DIGEST == source_digest.digest(folder, name)
    assert source_digest.digest(folder / "nowhere", "_walk") is None  # a wheel without sources: nothing to compare
