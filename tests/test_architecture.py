"""The direction of dependency from DESIGN.md: app -> exporters -> tracer's IR; `import tracer` needs torch alone."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPTIONAL = ("transformers", "accelerate", "peft", "bitsandbytes", "model_explorer", "panel", "bokeh",
            "networkx", "safetensors")


def _imports(package: str) -> dict[str, set[str]]:
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        text = path.read_text()
        found[str(path.relative_to(ROOT))] = set(re.findall(r"^\s*(?:from|import)\s+([\w.]+)", text, re.M))
    return found


def test_tracer_imports_neither_exporters_nor_app():
    for path, names in _imports("tracer").items():
        assert not {n for n in names if n.split(".")[0] in ("exporters", "app")}, path


def test_exporters_read_the_ir_only():
    for path, names in _imports("exporters").items():
        assert not {n for n in names if n.split(".")[0] == "app" or n.startswith("tracer.capture")}, path


def test_import_tracer_needs_torch_alone():
    code = f"import sys, tracer; print([m for m in {OPTIONAL!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
