"""The C kernel: its three extensions loaded, checked against their sources and configured from the contract
(`contract.py`); each entry point of `contract.ENTRY_POINTS` is an attribute here, or None where the Python
kernel runs. `_walk.c` runs before the forward (the model walks), `_hotpath.c` during it (the per-call hook, the
module wrapper), `_assembly.c` after it (labels, call templates, Ops, module scopes, parameter records).

`pip install -e .` builds the extensions where a C compiler is found (optional: without one the install still
succeeds and the capture records the same through the Python kernel, more slowly).

The kernel for a process: `TORCHLENS_EXPLORE_KERNEL=python` (or the older `TORCHLENS_EXPLORE_PURE_PYTHON=1`)
turns the C off; `c`, the default, uses it where it can. For a block of captures: `use_kernel("python")`.
Where the C cannot run, the capture runs the Python kernel and this module says why ONCE, with a
`KernelFallbackWarning` (a RuntimeWarning; its `reason` is "missing", "stale" or "layout"), never an ImportError:
- missing: an extension is not built (no compiler at install time, or a fresh checkout);
- stale: an extension was built from other sources than the `.c` / `.h` beside it (each embeds the digest of its
  sources, `source_digest.py`; an installed wheel carries no sources, so there is nothing to compare);
- layout: the C cannot use the contract (a record field it does not know, a state slot it cannot read), found
  when the session configures the kernel, after other modules of the package bound entry points: those
  references are set to None too (`_turn_off`), so a capture never mixes the two kernels.

What each entry point mirrors is named in `contract.ENTRY_POINTS` (its Python reference). The per-call hook
(`torch_function`) reads the session through `contract.CaptureState`'s slot offsets and a guard's common case
through `contract.GuardFastPath`'s; it holds its own reference to every value it uses across a call into Python.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator

from .. import source_digest
from .contract import (ENTRY_POINTS, EXTENSION_DATA, EXTENSIONS, RECORD_FIELDS, CaptureState, GuardFastPath,
                       guard_fast_descriptors, state_descriptors)

ENV_PURE_PYTHON = "TORCHLENS_EXPLORE_PURE_PYTHON"
ENV_KERNEL = "TORCHLENS_EXPLORE_KERNEL"
KERNELS = ("c", "python")
REMEDY = "pip install -e . (with a C compiler) rebuilds the capture's C extensions"


class KernelFallbackWarning(RuntimeWarning):
    """The capture's C kernel is not used: captures run the Python path (the same records, more slowly)."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"the capture's C kernel is not used ({reason}: {detail}); captures run the Python path, "
                         f"which records the same, more slowly. Remedy: {REMEDY}.")


def kernel() -> str:
    """The kernel this process asks for: "python" where the environment turns the extension off, else "c"."""
    if os.environ.get(ENV_PURE_PYTHON, "").strip() not in ("", "0"):
        return "python"
    return "python" if os.environ.get(ENV_KERNEL, "").strip().lower() == "python" else "c"


def _fall_back(reason: str, detail: str) -> None:
    warnings.warn(KernelFallbackWarning(reason, detail), stacklevel=3)


def _load_all() -> tuple[Any, Any, Any]:
    """The three extensions, or three Nones (an install builds them all or none; never a mix)."""
    if kernel() == "python":
        return None, None, None
    folder, mods, problems = _FOLDER, {}, []
    for name in EXTENSIONS:
        try:
            mod = importlib.import_module(f"{_CAPTURE}.{name}")
        except ImportError as exc:
            problems.append(("missing", f"{name} is not built: {exc}"))
            continue
        expected = source_digest.digest(folder, name)
        if expected is not None and getattr(mod, "SOURCE_DIGEST", "") != expected:
            sources = " and ".join(source_digest.SOURCES[name])
            problems.append(("stale", f"{name} was built from other sources than the {sources} beside it"))
        mods[name] = mod
    if problems:
        _fall_back(problems[0][0], "; ".join(detail for _r, detail in problems))
        return None, None, None
    return mods["_hotpath"], mods["_assembly"], mods["_walk"]


_FOLDER = Path(__file__).resolve().parent.parent  # tracer/capture/: the extensions and their sources
_CAPTURE = __package__.rpartition(".")[0]  # "tracer.capture"
_ext, _asm, _walk = _load_all()
_BY_EXTENSION = {"_hotpath": _ext, "_assembly": _asm, "_walk": _walk}
# Every C entry point of the contract as a module attribute (None where the C kernel is off)
for _name, _entry in ENTRY_POINTS.items():
    globals()[_name] = getattr(_BY_EXTENSION[_entry.extension], _name, None)
# All three built (an install builds them all or, without a compiler, none)
ACTIVE = _ext is not None and _asm is not None and _walk is not None


def configure_kernel(tensor_type: type, placeholder: Any, positions: tuple[str, ...]) -> None:
    """Hand the C kernel torch.Tensor, the scrub placeholder, the position names and the contract (the record's
    fields by name, the capture state's and a guard fast path's slots); where the C cannot use them (a field it
    does not know, a slot it cannot read): the Python kernel, with one warning."""
    if _ext is None:
        return
    try:
        _ext.configure(tensor_type, placeholder, positions, RECORD_FIELDS)
        _ext.configure_state(CaptureState, state_descriptors(), GuardFastPath, guard_fast_descriptors())
        _asm.configure_records(RECORD_FIELDS)
    except (TypeError, ValueError) as exc:
        _turn_off()
        _fall_back("layout", str(exc))


def entry_points() -> dict[str, Any]:
    """The contract's entry points as this process has them: name -> the C object, or None (Python kernel)."""
    return {name: globals()[name] for name in ENTRY_POINTS}


def _bindings() -> list[tuple[dict, str, Any]]:
    """(namespace, key, C object) for every binding of a C object in this package's modules (this one included,
    the extensions themselves not): what turning the C kernel off sets to None."""
    c_objects = {id(v): v for m in _BY_EXTENSION.values() if m is not None
                 for k, v in vars(m).items() if not k.startswith("__") and k not in EXTENSION_DATA}
    top, sources = __package__.split(".")[0], {f"{_CAPTURE}.{name}" for name in EXTENSIONS}
    found = []
    for module_name, module in list(sys.modules.items()):
        if module is not None and module_name not in sources and (
                module_name == top or module_name.startswith(top + ".")):
            space = getattr(module, "__dict__", {})
            found.extend((space, key, value) for key, value in list(space.items()) if id(value) in c_objects)
    return found


def _turn_off() -> None:
    """Every C entry point to None: here, and wherever a module of this package bound one before the session
    configured the extension (the walks, the module scopes, the call templates): a capture never mixes kernels."""
    global _ext, _asm, _walk, ACTIVE
    for space, key, _value in _bindings():
        space[key] = None
    _ext = _asm = _walk = None
    _BY_EXTENSION.update({"_hotpath": None, "_assembly": None, "_walk": None})
    ACTIVE = False


_SWITCH = threading.RLock()


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[str]:
    """Run the block's captures with kernel `name` ("python" or "c"), for debugging: "python" sets every C entry
    point to None in this package for the block (process-wide: every thread's captures in it) and puts them back
    after. An unknown name, or "c" where the C kernel is off, is refused (`invalid_input`). Yields the kernel
    the block runs."""
    from ...errors import InvalidInputError

    if name not in KERNELS:
        raise InvalidInputError(f"kernel must be one of {KERNELS}, not {name!r}", site="use_kernel",
                                remedy='use_kernel("python") or use_kernel("c")')
    if name == "c":
        if not ACTIVE:
            raise InvalidInputError("the C kernel is not active in this process (see KernelFallbackWarning)",
                                    site="use_kernel", remedy='Use the Python kernel ("python"), or rebuild the '
                                    "extension: pip install -e . (a compiler is needed)")
        yield "c"
        return
    with _SWITCH:
        saved = _bindings()
        for space, key, _value in saved:
            space[key] = None
        try:
            yield "python"
        finally:
            for space, key, value in saved:
                space[key] = value
