"""The capture kernel: one contract (`contract`), two implementations: the Python reference (the session,
module scopes, walks and build's own code, each named in `contract.ENTRY_POINTS`) and the C kernel (`native`).
The session calls the kernel; the kernel never imports the session.

`use_kernel("python")` runs a block of captures on the Python kernel (debugging); `current()` says which runs.
"""
from __future__ import annotations

from . import contract, native
from .native import KernelFallbackWarning, use_kernel


def current() -> str:
    """"c" where the C kernel's hook is bound now, else "python"."""
    return "c" if native.torch_function is not None and native.ACTIVE else "python"


__all__ = ["contract", "native", "KernelFallbackWarning", "use_kernel", "current"]
