"""Layout timings on a Llama-3.1-8B-class graph (~2,000 ops): collapsed, fully expanded, one click;
and the paper figure of GPT-2 with one block open, as `snapshot` makes it, after the trace is built.

Run: .venv/bin/python tests/bench/bench_layout.py [--repeats N]
Targets: fully expanded (cold) <= 1 s; re-layout after expanding one module <= 150 ms; the GPT-2
figure fits 3.4 x 9 inches at column width and takes <= 3 s.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

import tracer
from exporters.layout import LayoutEngine, default_expansion, group_tree, toggle
from exporters.layout.checks import edge_crossings


def llama_graph():
    """Weights-free Llama-3.1-8B config on meta; falls back to a 32-layer tiny-width real model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
               hidden_size=4096, intermediate_size=14336, max_position_embeddings=131072)
    try:
        with torch.device("meta"):
            model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
        ids = torch.ones(1, 8, dtype=torch.long, device="meta")
        return tracer.trace(model, (ids,), capture=tracer.CaptureOptions(structure_only=True)), "weights-free 8B (meta)"
    except Exception as exc:  # the weights-free path is optional here: say so, then use the tiny twin
        print(f"weights-free capture unavailable ({type(exc).__name__}: {exc}); using tiny widths")
        torch.manual_seed(0)
        cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
        model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
        ids = torch.arange(8).unsqueeze(0)
        return tracer.trace(model, (ids,), capture=tracer.CaptureOptions(save="none")), "32 layers, tiny widths"


def timed(fn, repeats: int, cold: bool, trace) -> tuple[float, float, float]:
    """Median, min and max seconds of `fn(engine)`; cold: a fresh engine (group tree + empty cache) each time."""
    times = []
    warm = LayoutEngine(trace)
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(LayoutEngine(trace) if cold else warm)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    n = ap.parse_args().repeats
    trace, what = llama_graph()
    default = default_expansion(trace)
    everything = group_tree(trace).addresses()
    one_more = toggle(default, "model.layers.7")
    full_minus = toggle(everything, "model.layers.7.self_attn")

    def click(base, after):
        samples = []
        for _ in range(n):
            engine = LayoutEngine(trace)
            engine.layout(base)  # the state before the click, cached in this session's engine
            t0 = time.perf_counter()
            engine.layout(after)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples), min(samples), max(samples)

    rows = []
    rows.append(("default expansion, cold (tree + layout)", timed(lambda e: e.layout(default), n, True, trace), None))
    rows.append(("default expansion, folded, cold", timed(lambda e: e.layout(default, fold_repeats=True), n, True, trace), None))
    rows.append(("fully expanded, cold", timed(lambda e: e.layout(everything), n, True, trace), 1.0))
    rows.append(("fully expanded, warm (cache hit)", timed(lambda e: e.layout(everything), n, False, trace), None))
    rows.append(("click: expand model.layers.7 from default", click(default, one_more), 0.150))
    rows.append(("click: collapse one attention in fully expanded", click(everything, full_minus), 0.150))
    engine = LayoutEngine(trace)
    full = engine.layout(everything)
    crossings = {name: len(edge_crossings(engine.layout(exp))) for name, exp in
                 (("default", default), ("layer 7 expanded", one_more), ("fully expanded", everything))}
    print(f"\nLayout bench: {trace.model_class} ({what}), {len(trace.ops)} ops, {trace.num_edges} edges, "
          f"{len(full.nodes)} boxes / {len(full.frames)} frames fully expanded; median (min-max) of {n}\n")
    print("| case | median (ms) | min-max (ms) | target (ms) | ratio to target |")
    print("|---|---:|---:|---:|---:|")
    for name, (med, lo, hi), target in rows:
        tgt = f"{target * 1000:.0f}" if target else "-"
        ratio = f"{med / target:.3f}" if target else "-"
        print(f"| {name} | {med * 1000:.1f} | {lo * 1000:.1f}-{hi * 1000:.1f} | {tgt} | {ratio} |")
    print(f"\nEdge-box crossings (exporters.layout.checks.edge_crossings): {crossings}")
    figure_bench(n)
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)")


def figure_bench(n: int) -> None:
    """`snapshot gpt2 --expand transformer.h.0` in steps, on a trace already built: engine with plumbing
    hidden and print spacing, scene, size at column width capped at 9 in, SVG and PNG (300 dpi) written."""
    from exporters import figures
    from exporters.layout.dag import COMPACT
    from exporters.layout.hiding import PLUMBING, hidden_ops
    from tracer.bridges.transformers import trace_config

    trace = trace_config("gpt2", input_shape=(1, 8))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("svg", "png"):
            wall, cpu = [], []
            for _ in range(n):
                t0, c0 = time.perf_counter(), time.process_time()
                engine = LayoutEngine(trace, hidden_ops(trace, PLUMBING), COMPACT)
                scene = figures.build_scene(trace, expanded=engine.default_expansion() | {"transformer.h.0"},
                                            fold_repeats=True, engine=engine)
                size = figures.figure_size(scene, "column", 9.0, 8.0)
                figures.write_scene(scene, Path(tmp) / f"gpt2.{fmt}", size, fmt, 300)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            rows[fmt] = (wall, cpu, size)
    print(f"\nFigure: GPT-2 small weights-free, `transformer.h.0` open, plumbing hidden, folded; median (min-max) of {n}\n")
    print("| format | size (in) | labels (pt) | fits 3.4 x 9 | wall (s) | CPU (s) | target |")
    print("|---|---|---|---|---:|---:|---|")
    for fmt, (wall, cpu, size) in rows.items():
        fits = size.width_in <= 3.4 + 1e-9 and size.height_in <= 9.0 + 1e-9
        print(f"| {fmt} | {size.width_in:.2f} x {size.height_in:.2f} | {size.font_pt:.1f} | {'yes' if fits else 'no'} | "
              f"{statistics.median(wall):.3f} ({min(wall):.3f}-{max(wall):.3f}) | "
              f"{statistics.median(cpu):.3f} ({min(cpu):.3f}-{max(cpu):.3f}) | <= 3 s |")


if __name__ == "__main__":
    main()
