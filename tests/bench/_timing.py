"""Shared timing helpers for the benchmark scripts (not tests: run them as scripts)."""
from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Callable


class Times(list):
    """Wall seconds of each run; `.cpu` holds this process's CPU seconds (`time.process_time`) of the same runs.

    On shared cores CPU time is the steadier figure: it leaves out the time spent waiting for a core.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cpu: list[float] = []


def sample_seconds(fn: Callable[[], object], repeats: int = 7, warmup: int = 2) -> list[float]:
    """Wall times of `fn` over `repeats` warm runs (a collection before each)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], repeats: int = 7, warmup: int = 2) -> float:
    """Median wall time of `fn` over `repeats` warm runs."""
    return statistics.median(sample_seconds(fn, repeats, warmup))


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int = 7, warmup: int = 2) -> dict[str, float]:
    """Medians of several callables measured round-robin in one run, so drift hits all alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def torchlens_or_none():
    """The public TorchLens package when it is installed in this environment (never required)."""
    try:
        import torchlens  # type: ignore[import-not-found]
    except ImportError:
        return None
    return torchlens


def noop_forward_wrapper(module: Any) -> Callable[..., Any]:
    """A forward that only calls `module`'s own: the scope mechanism's cost with nothing recorded."""
    inner = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        finally:
            pass
    return forward


def spread(values: list[float], fmt: str = ".2f", unit: str = "", scale: float = 1.0, count: bool = False) -> str:
    """"median{unit} (min-max[, n=N])" of `values` times `scale`, NaNs left out; "n/a" when none is left."""
    vals = [v * scale for v in values if v == v]
    if not vals:
        return "n/a"
    n = f", n={len(vals)}" if count else ""
    return f"{format(statistics.median(vals), fmt)}{unit} ({format(min(vals), fmt)}-{format(max(vals), fmt)}{n})"
