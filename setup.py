"""The one build step pyproject.toml cannot state: the optional C extensions of the capture's hot path.

Optional: where no C compiler is found the install goes on, and the capture runs its Python path
(`tracer/capture/kernel/native.py`, which says so once with a `KernelFallbackWarning`). Each extension embeds the
digest of its sources (`tracer/capture/source_digest.py`), which kernel/native.py checks against the sources
beside it: an editable install whose `.c` changed since the build falls back until `pip install -e .` again.
"""
import importlib.util
from pathlib import Path

from setuptools import Extension, setup

_CAPTURE = Path(__file__).resolve().parent / "tracer" / "capture"
_spec = importlib.util.spec_from_file_location("_tlx_source_digest", _CAPTURE / "source_digest.py")
_digests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_digests)  # by path: importing the package would import torch


def _extension(name: str) -> Extension:
    sources = [f"tracer/capture/{s}" for s in _digests.SOURCES[name]]
    digest = _digests.digest(_CAPTURE, name)
    return Extension(f"tracer.capture.{name}", [s for s in sources if s.endswith(".c")],
                     depends=[s for s in sources if not s.endswith(".c")],
                     define_macros=[(_digests.MACRO, f'"{digest}"')], optional=True)


setup(ext_modules=[_extension(name) for name in _digests.SOURCES])  # _walk before the forward, _hotpath during, _assembly after
