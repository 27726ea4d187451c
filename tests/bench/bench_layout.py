"""Layout timings on a Llama-3.1-8B-class graph (~2,000 ops): collapsed, fully expanded, one click.

Run: .venv/bin/python tests/bench/bench_layout.py [--repeats N]
Targets: fully expanded (cold) <= 1 s; re-layout after expanding one module <= 150 ms.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import tracer
from exporters import layout as layout_mod
from exporters.layout import compute_layout, default_expansion, group_tree, toggle


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


def timed(fn, repeats: int, cold: bool, trace) -> float:
    times = []
    for _ in range(repeats):
        if cold:
            layout_mod._ENGINES.clear()  # drop every cached sub-layout and the group tree
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
        def run():
            compute_layout(trace, base)  # warm: the state before the click
            t0 = time.perf_counter()
            compute_layout(trace, after)
            return time.perf_counter() - t0
        return run

    rows = []
    rows.append(("default expansion, cold (tree + layout)", timed(lambda: compute_layout(trace, default), n, True, trace), None))
    rows.append(("default expansion, folded, cold", timed(lambda: compute_layout(trace, default, fold_repeats=True), n, True, trace), None))
    rows.append(("fully expanded, cold", timed(lambda: compute_layout(trace, everything), n, True, trace), 1.0))
    rows.append(("fully expanded, warm (cache hit)", timed(lambda: compute_layout(trace, everything), n, False, trace), None))
    for name, base, after in (("click: expand model.layers.7 from default", default, one_more),
                              ("click: collapse one attention in fully expanded", everything, full_minus)):
        samples = []
        for _ in range(n):
            layout_mod._ENGINES.clear()
            samples.append(click(base, after)())
        rows.append((name, statistics.median(samples), 0.150))
    full = compute_layout(trace, everything)
    print(f"\nLayout bench: {trace.model_class} ({what}), {len(trace.ops)} ops, {trace.num_edges} edges, "
          f"{len(full.nodes)} boxes / {len(full.frames)} frames fully expanded; median of {n}\n")
    print("| case | median (ms) | target (ms) | ratio to target |")
    print("|---|---:|---:|---:|")
    for name, med, target in rows:
        tgt = f"{target * 1000:.0f}" if target else "-"
        ratio = f"{med / target:.3f}" if target else "-"
        print(f"| {name} | {med * 1000:.1f} | {tgt} | {ratio} |")


if __name__ == "__main__":
    main()
