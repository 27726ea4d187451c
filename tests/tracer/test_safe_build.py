"""A build that does not fit its sources falls back to the capture's Python path with one warning.

Each case is made for real in a copy of the package (`tracer/`) in a temporary folder, imported in a fresh
process ahead of the editable install: a `.c` edited after the build (stale), the session's record layout
moved away from the one the C fills (layout), no extension built at all (missing). Each must import without
an ImportError, say why once with a `KernelFallbackWarning` naming `pip install -e .`, turn the C entry points
off, and capture what the C kernel captures.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracer.capture import hotpath, source_digest

ROOT = Path(__file__).resolve().parents[2]
needs_extension = pytest.mark.skipif(not hotpath.ACTIVE, reason="the C extension is not built in this environment")

# Imports the package found first on sys.path, captures a small model with every kind of record field in use,
# and prints what it saw as JSON.
_SCRIPT = r"""
import json, re, warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import tracer
    from tracer.capture import build, call_template, hotpath, scopes, session
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.norm = nn.Linear(4, 4), nn.BatchNorm1d(4)
        self.register_buffer("scale", torch.full((4,), 2.0))
    def forward(self, x):
        h = self.norm(torch.relu(self.lin(x))) * self.scale
        a, b = torch.split(torch.cat([h, x], dim=1), 4, dim=1)
        self.scale.mul_(1.0)
        return (a + b).relu_()

torch.manual_seed(0)
model = Model().train()
t = tracer.trace(model, (torch.randn(3, 4),), capture=tracer.CaptureOptions(save="all"))
ops = [(op.label, op.kind, str(op.func), op.parents, op.module, op.module_call, op.module_stack, op.params,
        op.buffer_writes, op.inplace, op.source, op.io_path, op.output_index, op.num_outputs) for op in t.ops]
pieces = {"session": [session._SCAN_ARGS, session._RECORD_OUTPUTS, session._SITE, session._TORCH_FUNCTION],
          "build": [build._BUILD_OPS, build._OP_LABELS, build._MODULE_SCOPES, build._PARAM_RECORDS]}
print(json.dumps({
    "file": tracer.__file__, "active": hotpath.ACTIVE,
    "warnings": [[type(w.message).__name__, getattr(w.message, "reason", None), str(w.message)] for w in seen],
    "c_pieces": {k: [p is not None for p in v] for k, v in pieces.items()},
    "trace": re.sub(r"0x[0-9a-f]+", "0x", repr((ops, sorted(t.modules.items()), sorted(t.params.items())))),
    "values": {k: round(float(v.double().sum()), 6) for k, v in t.values.items()},
}))
"""


def _run(folder: Path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in (hotpath.ENV_PURE_PYTHON, hotpath.ENV_KERNEL)}
    environ.update(env, PYTHONPATH=str(folder))
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
def with_c(tmp_path_factory) -> dict:
    """The capture in an unchanged copy: the C kernel, no warning."""
    out = _run(_copy(tmp_path_factory.mktemp("unchanged")))
    assert out["warnings"] == [] and out["active"]
    assert out["c_pieces"] == {"session": [True] * 4, "build": [True] * 4}
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
def test_a_c_file_edited_after_the_build_falls_back_to_python(tmp_path, with_c):
    folder = _copy(tmp_path)
    source = folder / "tracer" / "capture" / "_walk.c"
    source.write_text("/* edited after the build */\n" + source.read_text())
    _assert_fell_back(_run(folder), "stale", with_c)


@needs_extension
def test_a_shared_header_edited_after_the_build_falls_back_to_python(tmp_path, with_c):
    folder = _copy(tmp_path)
    header = folder / "tracer" / "capture" / "_slots.h"
    header.write_text(header.read_text() + "\n/* edited after the build */\n")
    out = _run(folder)
    _assert_fell_back(out, "stale", with_c)
    assert "_hotpath" in out["warnings"][0][2] and "_assembly" in out["warnings"][0][2]  # both include it


@needs_extension
def test_a_record_layout_the_c_does_not_fill_falls_back_to_python(tmp_path, with_c):
    """The C's record positions (`hotpath.RECORD_FIELDS`, the hook `configure` checks the session's against)
    moved, as where the C was written for another layout than the session's: the session's Python path runs."""
    folder = _copy(tmp_path)
    loader = folder / "tracer" / "capture" / "hotpath.py"
    text = loader.read_text()
    assert text.count('"R_SITE": 11, "R_IO": 12') == 1
    loader.write_text(text.replace('"R_SITE": 11, "R_IO": 12', '"R_SITE": 12, "R_IO": 11'))
    out = _run(folder)
    _assert_fell_back(out, "layout", with_c)
    assert "'R_SITE': 11" in out["warnings"][0][2]  # the session's position, named


def test_no_extension_built_falls_back_to_python(tmp_path, with_c):
    folder = _copy(tmp_path, built=False)
    assert not list((folder / "tracer" / "capture").glob("_*.so"))
    _assert_fell_back(_run(folder), "missing", with_c)


@pytest.mark.parametrize("env", [{hotpath.ENV_KERNEL: "python"}, {hotpath.ENV_PURE_PYTHON: "1"}])
def test_the_python_kernel_chosen_for_a_process_says_nothing(tmp_path, with_c, env):
    out = _run(_copy(tmp_path), **env)
    assert out["warnings"] == [] and not out["active"]
    assert out["c_pieces"] == {"session": [False] * 4, "build": [False] * 4}
    assert out["trace"] == with_c["trace"] and out["values"] == with_c["values"]


def test_the_layout_check_names_the_field_that_moved():
    assert hotpath.check_layout(dict(hotpath.RECORD_FIELDS)) is None
    moved = {**hotpath.RECORD_FIELDS, "R_SITE": 12, "R_IO": 11}
    assert "'R_SITE': 12" in hotpath.check_layout(moved)
    assert hotpath.check_layout({k: v for k, v in hotpath.RECORD_FIELDS.items() if k != "R_IO"}) is not None


@needs_extension
def test_each_built_extension_carries_the_digest_of_its_sources():
    folder = ROOT / "tracer" / "capture"
    for name, mod in (("_hotpath", hotpath._ext), ("_assembly", hotpath._asm), ("_walk", hotpath._walk)):
        assert mod.SOURCE_DIGEST == source_digest.digest(folder, name)
    assert source_digest.digest(folder / "nowhere", "_walk") is None  # a wheel without sources: nothing to compare
