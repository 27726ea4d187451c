"""Save and load of an op-dense trace: medians with spread, and the JSON libraries compared.

Run: `python tests/bench/bench_store.py [--ops 100000] [--repeats 5]`. The trace is a loop of
`tanh(x * 0.5 + 0.1)` on a 2x4 tensor, then a Linear, captured with every value saved (one small
tensor per op: the per-op costs dominate). Prints markdown rows for docs/benchmarks.md.

`--ab OTHER_CHECKOUT [--rounds 3]`: save and load CPU time of this checkout's store against another
checkout's (e.g. a worktree of an earlier commit), in subprocesses that alternate A, B, A, B, so both
see the same machine load; on a shared machine the ratio is what to read.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tracer  # noqa: E402
from tracer.ir import ModuleStack, Op  # noqa: E402
from tracer.store import save_trace  # noqa: E402
from tests.bench._timing import Times, spread  # noqa: E402
from tests.models import TanhLoop  # noqa: E402  (bench_store.TanhLoop: the --ab script imports it from here)


def timed(fn: Callable[[], object], repeats: int, before: Callable[[], object] | None = None) -> Times:
    """Wall times of `fn`, each with the cyclic GC paused (as the store does) and its deferred collection
    included, so libraries that allocate many objects are not charged for collections of the benchmark's data."""
    times = Times()
    for _ in range(repeats):
        if before is not None:
            before()
        gc.collect()
        gc.disable()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            result = fn()
            gc.collect(0)
            times.append(time.perf_counter() - start)
            times.cpu.append(time.process_time() - cpu)
        finally:
            gc.enable()
        del result
    return times


def wall_and_cpu(times: Times) -> str:
    """Wall and CPU medians, each with (min-max)."""
    return f"{spread(times, '.3f', ' s')}; CPU {spread(times.cpu, '.3f', ' s', count=True)}"


def _op_dict(op: Op) -> dict:
    """An op as plain JSON data, field by field (what the standard library needs; faster than asdict)."""
    out = op.out
    return {
        "index": op.index, "label": op.label, "kind": op.kind, "func": op.func,
        "parents": [{"source": e.source, "position": e.position} for e in op.parents],
        "out": None if out is None else {"shape": list(out.shape), "dtype": out.dtype, "device": out.device,
                                         "requires_grad": out.requires_grad},
        "func_call_id": op.func_call_id, "output_index": op.output_index, "num_outputs": op.num_outputs,
        "module": op.module, "module_call": op.module_call, "module_stack": [list(e) for e in op.module_stack],
        "params": list(op.params), "buffer_writes": list(op.buffer_writes), "inplace": op.inplace,
        "source": None if op.source is None else {"file": op.source.file, "line": op.source.line,
                                                  "function": op.source.function},
        "io_path": op.io_path, "attrs": dict(op.attrs),
    }


def json_libraries(trace: tracer.Trace, repeats: int) -> list[tuple[str, list[float], list[float], int]]:
    """(library, encode times, decode-to-IR times, bytes) for the ops of `trace`."""
    rows = []
    ops = trace.ops

    def stdlib_encode() -> bytes:
        return json.dumps([_op_dict(op) for op in ops], separators=(",", ":")).encode()

    def to_ops(items: list[dict]) -> tuple:
        return tuple(Op(**{**d, "parents": tuple(tracer.Edge(**e) for e in d["parents"]),
                           "out": tracer.TensorMeta(**{**d["out"], "shape": tuple(d["out"]["shape"])}) if d["out"] else None,
                           "module_stack": tuple(map(tuple, d["module_stack"])), "params": tuple(d["params"]),
                           "buffer_writes": tuple(d["buffer_writes"]),
                           "source": tracer.SourceSite(**d["source"]) if d["source"] else None}) for d in items)

    data = stdlib_encode()
    rows.append(("json (stdlib)", timed(stdlib_encode, repeats), timed(lambda: to_ops(json.loads(data)), repeats),
                 len(data)))
    try:
        import orjson
    except ImportError:
        rows.append(("orjson", [], [], 0))
    else:
        def plain(value: object) -> object:  # a module stack as its pairs, a call template as its dict
            return tuple(value) if isinstance(value, ModuleStack) else dict(value)  # type: ignore[call-overload]

        data = orjson.dumps(ops, default=plain)
        rows.append(("orjson", timed(lambda: orjson.dumps(ops, default=plain), repeats),
                     timed(lambda: to_ops(orjson.loads(data)), repeats), len(data)))
    import msgspec

    from tracer.store.codec import _ENCODER  # its hook writes module stacks and call templates as plain data

    data = _ENCODER.encode(ops)
    rows.append(("msgspec, one object per op (schema 2)", timed(lambda: _ENCODER.encode(ops), repeats),
                 timed(lambda: msgspec.json.decode(data, type=tuple[Op, ...]), repeats), len(data)))
    from tracer.store.codec import _BodyEncoder
    from tracer.store.columns import OpColumns, to_columns
    from tracer.store.columns import to_ops as columns_to_ops

    def columns_encode() -> bytes:
        body_encoder = _BodyEncoder()
        return body_encoder.encoder.encode(to_columns(ops, body_encoder.text))

    data = columns_encode()
    rows.append(("msgspec, op columns and tables (schema 3, chosen)", timed(columns_encode, repeats),
                 timed(lambda: columns_to_ops(msgspec.json.decode(data, type=OpColumns), "bench"), repeats), len(data)))
    return rows


_CHILD = r"""
import gc, os, shutil, sys, tempfile, time
import torch
sys.path.insert(0, os.getcwd())
import tracer
from tests.bench.bench_store import TanhLoop
n_ops, repeats = int(sys.argv[1]), int(sys.argv[2])
trace = tracer.trace(TanhLoop(max(1, (n_ops - 4) // 3)), (torch.randn(2, 4, generator=torch.Generator().manual_seed(0)),))
folder = os.path.join(tempfile.mkdtemp(prefix="tlx-bench-ab-"), "t")
for _ in range(repeats):
    shutil.rmtree(folder, ignore_errors=True)
    gc.collect(); gc.disable(); cpu = time.process_time(); trace.save(folder); gc.collect(0)
    save = time.process_time() - cpu; gc.enable()
    gc.collect(); gc.disable(); cpu = time.process_time(); loaded = tracer.load(folder); gc.collect(0)
    load = time.process_time() - cpu; gc.enable()
    del loaded
    print(f"{save} {load}", flush=True)
shutil.rmtree(os.path.dirname(folder), ignore_errors=True)
"""


def alternate(other: Path, ops: int, rounds: int, repeats: int) -> None:
    """Save and load CPU of this checkout (A) and `other` (B), in subprocesses alternating A, B per round."""
    import subprocess

    here = Path(__file__).resolve().parents[2]
    runs: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    for _ in range(rounds):
        for name, root in (("A", here), ("B", other.resolve())):
            out = subprocess.run([sys.executable, "-c", _CHILD, str(ops), str(repeats)], cwd=root, check=True,
                                 capture_output=True, text=True).stdout
            runs[name] += [tuple(map(float, line.split())) for line in out.splitlines() if line.strip()]
    print(f"{ops:,} ops; A = {here}, B = {other}; {rounds} rounds x {repeats}; python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print("| checkout | save: CPU | load: CPU |")
    print("|---|---|---|")
    for name, pairs in runs.items():
        save, load = [p[0] for p in pairs], [p[1] for p in pairs]
        print(f"| {name} | {statistics.median(save):.3f} s ({min(save):.3f}-{max(save):.3f}) | "
              f"{statistics.median(load):.3f} s ({min(load):.3f}-{max(load):.3f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-json-compare", action="store_true")
    parser.add_argument("--ab", type=Path, help="another checkout to alternate with (save and load CPU only)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.ab is not None:
        alternate(args.ab, args.ops, args.rounds, args.repeats)
        return
    model = TanhLoop(max(1, (args.ops - 4) // 3))
    trace = tracer.trace(model, (torch.randn(2, 4, generator=torch.Generator().manual_seed(0)),))
    work = Path(tempfile.mkdtemp(prefix="tlx-bench-store-"))
    try:
        rows = []
        for compress in (False, True):
            folder = work / f"t{int(compress)}"
            save_times = timed(lambda: save_trace(trace, folder, compress=compress), args.repeats,
                               before=lambda: shutil.rmtree(folder, ignore_errors=True))
            load_times = timed(lambda: tracer.load(folder), args.repeats)
            size = sum(p.stat().st_size for p in folder.iterdir())
            rows.append(("trace.json.gz" if compress else "trace.json", save_times, load_times, size))
        assert tracer.load(work / "t0").ops == trace.ops
        print(f"{len(trace):,} ops, {len(trace.values):,} values; torch {torch.__version__}, python "
              f"{platform.python_version()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        print()
        print("| structure file | save | load | folder size |")
        print("|---|---|---|---|")
        for name, s, l, size in rows:
            print(f"| {name} | {wall_and_cpu(s)} | {wall_and_cpu(l)} | {size / 1e6:.1f} MB |")
        if not args.no_json_compare:
            print()
            print("| JSON library (ops only) | encode | decode into IR | bytes |")
            print("|---|---|---|---|")
            for name, enc, dec, size in json_libraries(trace, args.repeats):
                if not enc:
                    print(f"| {name} | not installed | | |")
                else:
                    print(f"| {name} | {wall_and_cpu(enc)} | {wall_and_cpu(dec)} | {size / 1e6:.1f} MB |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
