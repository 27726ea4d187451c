"""What observing a module call costs: no scope, a no-op hook pair, a no-op forward wrapper.

Run: `python tests/bench/bench_module_scopes.py [--calls 200000] [--captures gpt2,8b] [--pairs 25]`.
Times calls of a leaf module that returns its input (so only the call machinery is measured), in turns,
as the median of 5 rounds per mechanism; then registering and removing a hook pair (what capture avoids
for modules without hooks). Then whole captures in one process, one torch thread, CPU time, in pairs:
every module scope kept by hooks (as when global module hooks exist) against capture's default (forward
wrappers where a module has no hooks), everything else the same; the median paired difference is the
figure to read on a machine whose speed drifts.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable

from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.bench._timing import noop_forward_wrapper  # noqa: E402


class _Leaf(nn.Module):
    def forward(self, x: Any) -> Any:
        return x


def _per_call(module: nn.Module, calls: int) -> float:
    x = object()
    start = time.perf_counter()
    for _ in range(calls):
        module(x)
    return (time.perf_counter() - start) / calls * 1e6


def _hooked(module: nn.Module) -> Callable[[], None]:
    pre = module.register_forward_pre_hook(lambda m, a, k: None, with_kwargs=True)
    post = module.register_forward_hook(lambda m, a, k, o: None, with_kwargs=True, always_call=True)
    return lambda: (pre.remove(), post.remove()) and None


def _wrapped(module: nn.Module) -> Callable[[], None]:
    module.__dict__["forward"] = noop_forward_wrapper(module)
    return lambda: module.__dict__.pop("forward", None) and None


def _capture(case: str) -> Callable[[], object]:
    import torch

    import tracer

    if case == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config()).eval()
        ids = torch.randint(0, 50257, (1, 8))
        none = tracer.CaptureOptions(save="none")
        return lambda: tracer.trace(model, (ids,), capture=none)
    from tracer.bridges.transformers import build_meta_model, load_config, trace_ids

    meta = build_meta_model(load_config("llama-3.1-8b"))
    return lambda: trace_ids(meta, (1, 8))


def paired_captures(case: str, pairs: int) -> str:
    """A markdown row: median capture CPU time with every scope hooked, with wrappers, and the paired difference."""
    import torch

    from tracer.capture import scopes

    torch.set_num_threads(1)
    capture = _capture(case)
    default = scopes._global_module_hooks
    times: dict[str, list[float]] = {"hooks": [], "wrappers": []}
    with torch.no_grad():
        capture()
        for _ in range(pairs):
            for name in times:
                scopes._global_module_hooks = (lambda: True) if name == "hooks" else default
                try:
                    start = time.process_time()
                    capture()
                    times[name].append(time.process_time() - start)
                finally:
                    scopes._global_module_hooks = default
    diff = [h - w for h, w in zip(times["hooks"], times["wrappers"])]
    med = statistics.median
    return (f"| {case} | {med(times['hooks']) * 1e3:.1f} ms | {med(times['wrappers']) * 1e3:.1f} ms | "
            f"**{med(diff) * 1e3:.2f} ms** ({min(diff) * 1e3:.1f} to {max(diff) * 1e3:.1f}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--captures", default="gpt2,8b", help="comma list of gpt2, 8b (empty: none)")
    ap.add_argument("--pairs", type=int, default=25)
    ns = ap.parse_args()
    module = _Leaf()
    setups: dict[str, Callable[[nn.Module], Callable[[], None]]] = {
        "no scope": lambda m: (lambda: None), "hook pair, no-op": _hooked, "forward wrapper, no-op": _wrapped}
    times: dict[str, list[float]] = {name: [] for name in setups}
    for _round in range(5):
        for name, setup in setups.items():
            undo = setup(module)
            try:
                times[name].append(_per_call(module, ns.calls))
            finally:
                undo()
    print("| mechanism | per module call (median of 5, min-max) |\n|---|---|")
    for name, t in times.items():
        print(f"| {name} | {statistics.median(t):.2f} us ({min(t):.2f}-{max(t):.2f}) |")
    n = 20_000
    start = time.perf_counter()
    for _ in range(n):
        _hooked(module)()
    print(f"\nregistering and removing a hook pair: {(time.perf_counter() - start) / n * 1e6:.2f} us per module")
    cases = [c for c in ns.captures.split(",") if c]
    if cases:
        print(f"\n| capture ({ns.pairs} pairs) | every scope hooked | wrappers (default) | hooked - wrapped, median "
              f"(min to max) |\n|---|---|---|---|")
        for case in cases:
            print(paired_captures(case, ns.pairs))


if __name__ == "__main__":
    main()
