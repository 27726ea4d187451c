"""A reference-leak check of the capture's C kernel (run by run_asan.sh; also on its own with the checkout's build).

Captures two models many times with the C kernel on and checks that every object the C reads (parameters,
buffers, modules, inputs) has the same reference count after the traces are dropped as before, and that the
interpreter's allocated blocks grow by less than a quarter block per op per capture more than with the Python
kernel in the same process (an object leaked per op adds one block per op per capture; the count moves by a few
hundred blocks either way from run to run, so a leak of one object per capture is below what this sees, while
the reference counts above are exact). Prints what it measured; exits non-zero on a leak.
"""
from __future__ import annotations

import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402
import torch  # noqa: E402

import tracer  # noqa: E402
from tests.models import tiny_gpt2  # noqa: E402
from tests.tracer.test_hotpath import _Odd, _python_path  # noqa: E402
from tracer.capture.kernel import native as hotpath  # noqa: E402

WARM, MEASURED = 30, 100


def _watched(model: torch.nn.Module, inputs: tuple) -> list:
    return [*model.parameters(), *model.buffers(), *model.modules(), *inputs]


def measure(model: torch.nn.Module, args: tuple, kwargs: dict, save: str) -> tuple[int, int, int, int]:
    """Ops per capture, allocated blocks grown over MEASURED captures, watched objects whose count moved, watched."""
    options = tracer.CaptureOptions(save=save)

    def once() -> int:
        t = tracer.trace(model, args, input_kwargs=kwargs, capture=options)
        n = len(t.ops)
        del t
        return n

    for _ in range(WARM):
        n_ops = once()
    gc.collect()
    watched = _watched(model, (*args, *kwargs.values()))
    before_refs = [sys.getrefcount(o) for o in watched]
    before_blocks = sys.getallocatedblocks()
    for _ in range(MEASURED):
        once()
    gc.collect()
    grown = sys.getallocatedblocks() - before_blocks
    after_refs = [sys.getrefcount(o) for o in watched]
    moved = sum(a != b for a, b in zip(after_refs, before_refs))
    return n_ops, grown, moved, len(watched)


def check(name: str, model: torch.nn.Module, args: tuple, kwargs: dict, save: str) -> bool:
    n_ops, grown, moved, n_watched = measure(model, args, kwargs, save)
    with pytest.MonkeyPatch.context() as m:
        _python_path(m)
        _n, baseline, moved_py, _w = measure(model, args, kwargs, save)
    ok = moved == 0 and moved_py == 0 and grown <= baseline + n_ops * MEASURED // 4
    print(f"{name} save={save}: {n_ops} ops, {MEASURED} captures: allocated blocks {grown:+d} with the C kernel, "
          f"{baseline:+d} with the Python; {moved} of {n_watched} watched objects changed reference count "
          f"-> {'ok' if ok else 'LEAK'}")
    return ok


def main() -> int:
    if not hotpath.ACTIVE:
        print("the C kernel is not active here (see kernel.native.KernelFallbackWarning): nothing to check")
        return 1
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0))
    odd = _Odd().eval()
    cases = [("odd", odd, (torch.randn(3, 4),), {"bias": torch.randn(4)}), ("gpt2", tiny_gpt2(), (ids,), {})]
    results = [check(name, m, a, k, save) for name, m, a, k in cases for save in ("none", "all")]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
