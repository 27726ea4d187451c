"""Public callables of `tracer` never collide with module names, whatever is imported first."""
from __future__ import annotations

import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import tracer

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_under_tracer_shares_a_public_name():
    modules = {m.name for m in pkgutil.iter_modules(tracer.__path__)}
    assert not modules & set(tracer.__all__), modules & set(tracer.__all__)


def test_summary_doctor_and_validate_stay_callables_after_every_import():
    """In a fresh interpreter: import every subpackage and use the paths that once shadowed them."""
    script = (
        "import importlib, pkgutil, types, torch, tracer, exporters, app\n"
        "for pkg in (tracer, exporters):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "import exporters.model_explorer\n"
        "t = tracer.trace(torch.nn.Linear(2, 2), (torch.zeros(1, 2),))\n"
        "t.summary(); tracer.validate(t)\n"
        "for name in ('summary', 'doctor', 'validate', 'trace', 'load'):\n"
        "    f = getattr(tracer, name)\n"
        "    assert callable(f) and not isinstance(f, types.ModuleType), name\n"
        "print(tracer.summary(torch.nn.Linear(2, 2), input_shape=(1, 2)).splitlines()[0])\n"
        "print(tracer.doctor(torch.nn.Linear(2, 2)).to_text().splitlines()[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert isinstance(tracer.summary, types.FunctionType)
