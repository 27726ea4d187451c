"""Op-dense forwards: per-op capture cost against a bare recorder floor, and every later step.

Run: `python tests/bench/bench_op_dense.py [--sizes 10000,100000,1000000] [--device cpu|cuda] [--threads N]`
(`TORCHLENS_EXPLORE_PURE_PYTHON=1` times the capture without its C hot path).
Prints markdown tables for docs/benchmarks.md. The floor is a bare `TorchFunctionMode` that only
appends each call to a list, measured in the same run, in turns with the bare forward and the captures
(each sample repeats a short forward until it takes about MIN_SAMPLE_CPU seconds of CPU, and reports the time
per forward); ratios are the figures to read. For GPT-2 small and the 8B weights-free model it also
times the mechanism's floors: a pass-through function mode, the bare recorder, a pass-through mode
with a no-op pre- and post-hook on every module, and one with every module's forward wrapped by a no-op
wrapper (what observing every call costs before anything is recorded, with capture's mechanism); GPT-2
small's graph is timed a second time at width 64, where kernels cost next to nothing (the capture's own
cost as a fast accelerator's forward shows it). Under each model table, a paired ratio: rounds that time
the bare forward and the capture back to back, the median of their ratios with quartiles and range (the
figure a host whose speed swings within seconds moves least, and the one the model targets are read from;
the table's ratio of medians compares samples taken seconds apart; docs/benchmarks.md). The 1,000,000-op row
captures with `save="none"` only (and reports the peak RSS it reached).
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tracer  # noqa: E402
from tests.bench._memory import reset_peak, status_kb  # noqa: E402
from tests.bench._timing import Times, noop_forward_wrapper  # noqa: E402
from tests.models import TanhLoop  # noqa: E402


class Nest(nn.Module):
    """A chain of `depth` modules, each calling the next: module nesting as deep as it gets."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.inner = Nest(depth - 1) if depth > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1
        return self.inner(x) if self.inner is not None else x


def nest(depth: int) -> nn.Module:
    """`Nest(depth)` built iteratively (recursive construction would hit the recursion limit)."""
    leaf = Nest(1)
    for _ in range(depth - 1):
        outer = Nest.__new__(Nest)
        nn.Module.__init__(outer)
        outer.inner = leaf
        leaf = outer
    return leaf


class BareRecorder(TorchFunctionMode):
    """The floor: a function mode that records each call in a list and nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, args, kwargs))
        return func(*args, **(kwargs or {}))


MIN_SAMPLE_CPU = 0.3  # CPU seconds a sample of a short forward runs for (repeating the forward inside it)
PAIRS = 21  # rounds of the paired ratio (`paired_ratios`)
MIN_PAIRED_CPU = 0.1  # CPU seconds of one sample of a pair: one 8B meta forward, two of GPT-2 small


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: str, repeats: int) -> Times:
    """Wall and CPU times of `repeats` runs of `fn` (after one warm-up), synchronising the device.

    CPU time (`time.process_time`) is reported beside wall time: on shared cores it is the steadier
    figure (it leaves out time spent waiting for a core).
    """
    fn()
    out = Times()
    for _ in range(repeats):
        _sync(device)
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        _sync(device)
        out.append(time.perf_counter() - start)
        out.cpu.append(time.process_time() - cpu)
    return out


def timed_in_turns(fns: dict[str, Callable[[], object]], device: str, repeats: int,
                   min_cpu: float = 0.0) -> dict[str, Times]:
    """Times per run of several callables, measured in turns: each of `repeats` rounds runs every one, so
    drift and load from other processes hit all of them alike.

    A sample runs its callable back to back enough times to take about `min_cpu` CPU seconds (judged on
    its warm-up run) and records the time per run: a forward of a few milliseconds is not measured alone.
    Each sample starts after a full collection, so a collection of the whole heap (the model, torch,
    transformers: 100 ms and more) that an earlier sample's garbage made due lands in no sample.
    """
    inner: dict[str, int] = {}
    for name, fn in fns.items():
        cpu = time.process_time()
        fn()
        inner[name] = max(1, math.ceil(min_cpu / max(time.process_time() - cpu, 1e-4)))
    out = {name: Times() for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            n = inner[name]
            gc.collect()  # no sample inherits the collections an earlier one's garbage would trigger
            _sync(device)
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                fn()
            _sync(device)
            out[name].append((time.perf_counter() - start) / n)
            out[name].cpu.append((time.process_time() - cpu) / n)
    return out


def fmt(times: list[float]) -> str:
    """Median with the spread (min-max) in seconds."""
    return f"{statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})"


def op_dense_rows(n_ops: int, device: str, repeats: int) -> list[tuple[str, Times, int]]:
    """(step, times, ops) for one loop size."""
    from exporters.model_explorer import export

    steps = max(1, (n_ops - 3) // 3)
    torch.manual_seed(0)
    model = TanhLoop(steps).to(device).eval()
    x = torch.randn(2, 4, device=device)
    rows: list[tuple[str, Times, int]] = []

    def bare() -> None:
        with torch.no_grad():
            model(x)

    def recorder() -> None:
        with torch.no_grad(), BareRecorder():
            model(x)

    none = tracer.CaptureOptions(save="none")
    cases = {"bare forward": bare, "bare recorder (floor)": recorder,
             "capture, save=none": lambda: tracer.trace(model, (x,), capture=none)}
    if n_ops <= 200_000:
        cases["capture, save=all"] = lambda: tracer.trace(model, (x,))
    # In turns, each sample at least MIN_SAMPLE_CPU long: the floor is a difference of two short runs.
    rows.extend((step, times, n_ops) for step, times in timed_in_turns(cases, device, repeats, MIN_SAMPLE_CPU).items())
    if n_ops > 200_000:
        return rows
    t = tracer.trace(model, (x,))
    work = tempfile.mkdtemp(prefix="bench-op-dense-")
    try:
        folder = os.path.join(work, "t")

        def save() -> None:
            shutil.rmtree(folder, ignore_errors=True)
            t.save(folder)

        rows.append(("t.save", timed(save, device, repeats), n_ops))
        rows.append(("tracer.load", timed(lambda: tracer.load(folder), device, repeats), n_ops))
        me = os.path.join(work, "me.json")
        rows.append(("Model Explorer export", timed(lambda: export(t, me), device, repeats), n_ops))
        rows.append(("tracer.validate", timed(lambda: tracer.validate(t), device, repeats), n_ops))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def million_rss(device: str) -> tuple[float, int]:
    """Seconds and peak RSS added (MB) of one 1,000,000-op capture with save="none"."""
    model = TanhLoop(333_333).to(device).eval()
    x = torch.randn(2, 4, device=device)
    reset_peak()
    base = status_kb("VmRSS")
    start = time.perf_counter()
    tracer.trace(model, (x,), capture=tracer.CaptureOptions(save="none"))
    _sync(device)
    took = time.perf_counter() - start
    return took, (status_kb("VmHWM") - base) // 1024


class PassThrough(TorchFunctionMode):
    """The function mode's own cost: every call passes through, nothing is recorded."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _no_op_pre(module: nn.Module, args: tuple, kwargs: dict) -> None:
    return None


def _no_op_post(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
    return None


def hooks_floor(model: nn.Module, run: Callable[[], object]) -> Callable[[], None]:
    """`run` under a pass-through function mode with a no-op pre- and post-hook on every module, registered
    and removed around it (with kwargs, the post-hook always called): the cost of observing every module
    call by hooks, as capture does for a module that has hooks of its own."""
    modules = [m for _, m in model.named_modules(remove_duplicate=False)]

    def floor() -> None:
        handles = []
        try:
            for m in modules:
                handles.append(m.register_forward_pre_hook(_no_op_pre, with_kwargs=True))
                handles.append(m.register_forward_hook(_no_op_post, with_kwargs=True, always_call=True))
            with PassThrough():
                run()
        finally:
            for h in handles:
                h.remove()
    return floor


def mechanism_floor(model: nn.Module, run: Callable[[], object]) -> Callable[[], None]:
    """`run` under a pass-through function mode with every module's forward wrapped by a no-op wrapper, set
    and removed around it as a capture does for a module without hooks: what observing every torch call and
    every module call costs before anything is recorded."""
    modules = list({id(m): m for _, m in model.named_modules(remove_duplicate=False)}.values())

    def floor() -> None:
        try:
            for m in modules:
                m.__dict__["forward"] = noop_forward_wrapper(m)
            with PassThrough():
                run()
        finally:
            for m in modules:
                m.__dict__.pop("forward", None)
    return floor


def model_cases(model: nn.Module, forward: Callable[[], object], capture: Callable[[], object]
                ) -> dict[str, Callable[[], object]]:
    """The cases a model ratio is read from, all but the grad-on pair under no_grad (the bare forward's mode)."""
    def no_grad(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                fn()
        return run

    def under(mode: type[TorchFunctionMode]) -> Callable[[], None]:
        def run() -> None:
            with mode():
                forward()
        return run

    return {"bare forward": no_grad(forward),
            "function mode, pass-through": no_grad(under(PassThrough)),
            "bare recorder": no_grad(under(BareRecorder)),
            "mode + module hooks, no-op": no_grad(hooks_floor(model, forward)),
            "mode + forward wrappers, no-op (the mechanism's floor)": no_grad(mechanism_floor(model, forward)),
            "capture": no_grad(capture),
            "bare forward, grad on": forward,
            "capture, grad on": capture}


def paired_ratios(cases: dict[str, Callable[[], object]], device: str, pairs: int) -> list[float]:
    """CPU ratios of the capture to the bare forward, one per round of `pairs` rounds that each time the bare
    forward, then the capture, back to back with nothing between: on a host whose speed swings within seconds
    (docs/benchmarks.md shows one) both samples of a pair see the same speed, where the ratio of two
    medians taken over a minute need not."""
    t = timed_in_turns({name: cases[name] for name in ("bare forward", "capture")}, device, pairs, MIN_PAIRED_CPU)
    return [c / b for c, b in zip(t["capture"].cpu, t["bare forward"].cpu)]


ModelRatios = tuple[dict[str, Times], list[float]]  # every case in turns, and the paired ratios


def model_ratios(cases: dict[str, Callable[[], object]], device: str, repeats: int) -> ModelRatios:
    """Every case timed in turns, then the paired ratios of the capture (`paired_ratios`)."""
    return timed_in_turns(cases, device, repeats, MIN_SAMPLE_CPU), paired_ratios(cases, device, PAIRS)


def gpt2_ratio(device: str, repeats: int, narrow: bool = False) -> ModelRatios:
    """GPT-2 small on 8 ids: the bare forward, the mechanism's floors and the capture (save=none), in turns.

    `narrow`: the same graph (12 blocks, 755 torch calls, 164 modules) at width 64 with a 1,000-token
    vocabulary, whose kernels cost next to nothing on a CPU: the capture's own cost, fixed and per call,
    as a fast accelerator's forward would show it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_embd=64, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0) if narrow else GPT2Config()
    model = GPT2LMHeadModel(config).to(device).eval()
    ids = torch.randint(0, config.vocab_size, (1, 8), device=device)
    none = tracer.CaptureOptions(save="none")
    cases = model_cases(model, lambda: model(ids), lambda: tracer.trace(model, (ids,), capture=none))
    return model_ratios(cases, device, repeats)


def weights_free_ratio(repeats: int) -> ModelRatios:
    """The shipped Llama-3.1-8B config on the meta device: its bare meta forward, the mechanism's floors and
    its weights-free capture (`trace_ids`), in turns."""
    from tracer.bridges.transformers import build_meta_model, load_config, trace_ids

    model = build_meta_model(load_config("llama-3.1-8b"))
    ids = torch.zeros((1, 8), dtype=torch.long, device="meta")
    cases = model_cases(model, lambda: model(ids), lambda: trace_ids(model, (1, 8)))
    return model_ratios(cases, "cpu", repeats)


def ratio_table(title: str, ratios: ModelRatios) -> list[str]:
    """Markdown rows: each case's CPU and wall time, both as a ratio of medians to the bare (no_grad)
    forward's, and the median (min-max) of the per-round CPU ratios (each round times every case once);
    then a line with the paired ratios' median, quartiles and range."""
    med = statistics.median
    times, pairs = ratios
    bare = times["bare forward"]
    lines = [f"| {title} | CPU | ratio (CPU) | per-round CPU ratio | wall | ratio (wall) |", "|---|---|---|---|---|---|"]
    for case, t in times.items():
        rounds = [c / b for c, b in zip(t.cpu, bare.cpu)]
        lines.append(f"| {case} | {cpu(t)} | **{med(t.cpu) / med(bare.cpu):.2f}x** | {med(rounds):.2f}x "
                     f"({min(rounds):.2f}-{max(rounds):.2f}) | {fmt(t)} | {med(t) / med(bare):.2f}x |")
    q1, _, q3 = statistics.quantiles(pairs, n=4)
    lines += ["", f"Paired, {len(pairs)} rounds of the bare forward then the capture back to back (no_grad): capture "
                  f"over bare **{med(pairs):.2f}x** (CPU; quartiles {q1:.2f}-{q3:.2f}, range "
                  f"{min(pairs):.2f}-{max(pairs):.2f}): the figure the model targets are read from"]
    return lines


def nest_rows(depths: tuple[int, ...], repeats: int) -> list[tuple[int, Times, Times, Times]]:
    """(depth, bare forward, capture, summary) times for chains of nested modules.

    The plain forward of such a chain needs a higher recursion limit and, past a few thousand
    levels, a bigger C stack than the main thread's (CPython crashes at 10,000 levels here): each
    depth runs in a thread with a 512 MiB stack.
    """
    out: list[tuple[int, Times, Times, Times]] = []

    def one(depth: int) -> None:
        model = nest(depth)
        x = torch.zeros(2)
        none = tracer.CaptureOptions(save="none")
        with torch.no_grad():
            bare = timed(lambda: model(x), "cpu", repeats)
        cap = timed(lambda: tracer.trace(model, (x,), capture=none), "cpu", repeats)
        t = tracer.trace(model, (x,), capture=none)
        out.append((depth, bare, cap, timed(t.summary, "cpu", repeats)))

    for depth in depths:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 8 * depth + 1000))  # the plain forward needs it
        threading.stack_size(512 * 1024 * 1024)
        worker = threading.Thread(target=one, args=(depth,))
        worker.start()
        worker.join()
        threading.stack_size(0)
    return out


def cpu(times: Times) -> str:
    """Median CPU seconds with the spread (min-max)."""
    return fmt(times.cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", "5")))
    ap.add_argument("--skip", default="", help="comma list of: nest,gpt2,weights-free (gpt2 skips both GPT-2 tables)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's own)")
    ns = ap.parse_args()
    if ns.threads:
        torch.set_num_threads(ns.threads)
    skip = set(filter(None, ns.skip.split(",")))
    sizes = [int(s) for s in ns.sizes.split(",") if s]
    dev = ns.device
    med = statistics.median
    name = torch.cuda.get_device_name() if dev.startswith("cuda") else f"{os.cpu_count()} CPU cores"
    from tracer.capture import hotpath

    print(f"torch {torch.__version__}, python {platform.python_version()}, {name}, {torch.get_num_threads()} torch "
          f"threads, capture's C hot path {'on' if hotpath.ACTIVE else 'off'}; medians of "
          f"{ns.repeats} warm runs with (min-max); load average at start {os.getloadavg()[0]:.1f}")
    print()
    print("| ops | step | wall | CPU | CPU per op beyond bare | vs floor (CPU) |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        if n > 200_000:
            took, mb = million_rss(dev)
            print(f"| {n:,} | capture, save=none (one run) | {took:.2f} s | - | - | peak RSS +{mb:,} MB |")
            continue
        rows = op_dense_rows(n, dev, ns.repeats)
        bare = med(rows[0][1].cpu)
        floor_cost = med(rows[1][1].cpu) - bare
        for step, times, ops in rows:
            extra = med(times.cpu) - (bare if step.startswith(("bare", "capture")) else 0.0)
            vs = f"{extra / floor_cost:.1f}x" if step.startswith("capture") and floor_cost > 0 else "-"
            per = f"{extra / ops * 1e6:.1f} us" if step != "bare forward" else "-"
            print(f"| {n:,} | {step} | {fmt(times)} | {cpu(times)} | {per} | {vs} |")
    print()
    print("(CPU per op: beyond the bare forward for the bare recorder and the captures; the whole step otherwise)")
    if "nest" not in skip:
        print()
        print("| nested modules | bare forward (CPU) | capture, save=none: wall | CPU | summary(): CPU |")
        print("|---|---|---|---|---|")
        for depth, bare_t, cap, summ in nest_rows((3_000, 10_000), ns.repeats):
            print(f"| {depth:,} | {cpu(bare_t)} | {fmt(cap)} | {cpu(cap)} | {cpu(summ)} |")
    if "gpt2" not in skip:
        print()
        print("\n".join(ratio_table(f"GPT-2 small, 8 ids, {dev}", gpt2_ratio(dev, ns.repeats))))
        print()
        print("\n".join(ratio_table(f"GPT-2 small's graph at width 64 (cheap kernels), 8 ids, {dev}",
                                     gpt2_ratio(dev, ns.repeats, narrow=True))))
    if "weights-free" not in skip and not dev.startswith("cuda"):
        print()
        print("\n".join(ratio_table("Llama-3.1-8B weights-free (meta)", weights_free_ratio(ns.repeats))))
    print()
    if dev.startswith("cuda"):
        print(f"GPU column: this run ({name}).")
    else:
        print("GPU column: not run (no GPU in this run; rerun with --device cuda where one is available).")
    print(f"Load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
