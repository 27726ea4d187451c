"""Trace diffs: structure diff of two weights-free Llama-3.1-8B traces, numeric diff of two GPT-2 small traces.

Run: `python tests/bench/bench_diff.py [--repeats 7] [--tokens 16]`. Side b of the 8B case is the same
config with sdpa attention (so the diff has real work: matched, added and removed ops); the GPT-2 small
case compares fp32 against a bf16 twin with every value saved (random weights, the shipped config's
sizes). Only `tracer.diff` is timed: captures happen once, before. The last row times the Compare tab's
recolour on a tolerance change (re-judging the diff, new fills, patched source; no browser round trip). Prints markdown rows for
docs/benchmarks.md with medians, min-max, the sizes and the machine's load.
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import tracer  # noqa: E402
from tracer.bridges.transformers import trace_config  # noqa: E402
from tracer.differ import twin_traces  # noqa: E402
from tests.bench._timing import sample_seconds, spread  # noqa: E402



def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    config = ROOT / "static" / "configs" / "llama-3.1-8b.json"
    a8 = trace_config(config, (1, 8), attn_implementation="eager")
    b8 = trace_config(config, (1, 8), attn_implementation="sdpa")
    d8 = tracer.diff(a8, b8)
    structure = sample_seconds(lambda: tracer.diff(a8, b8), args.repeats, warmup=1)

    from transformers import AutoConfig, GPT2LMHeadModel

    data = __import__("json").loads((ROOT / "static" / "configs" / "gpt2.json").read_text())
    data.pop("model_type", None)
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(AutoConfig.for_model("gpt2", **data)).eval()
    ids = torch.randint(0, gpt2.config.vocab_size, (1, args.tokens))
    ga, gb, _ = twin_traces(gpt2, (ids,), against="bf16")
    dg = tracer.diff(ga, gb)
    numeric = sample_seconds(lambda: tracer.diff(ga, gb), args.repeats, warmup=1)

    recolour = recolour_times(gpt2, ids, (ga, gb, dg), args.repeats)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# {time.strftime('%Y-%m-%d')} · {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"torch threads {torch.get_num_threads()}, Python {platform.python_version()}, load average {load:.1f}")
    print("| diff | sizes | median (min-max) | target |")
    print("|---|---|---|---|")
    print(f"| structure: Llama-3.1-8B weights-free, eager vs sdpa | {len(a8.ops):,} vs {len(b8.ops):,} ops, "
          f"{len(d8.pairs):,} matched, +{len(d8.added_ops)} -{len(d8.removed_ops)} | {spread(structure, '.3f', ' s', count=True)} | <= 0.2 s |")
    print(f"| numeric: GPT-2 small fp32 vs bf16, {args.tokens} tokens, all values | {len(ga.ops):,} ops, "
          f"{len(dg.divergences):,} compared, {sum(v.numel() for v in ga.values.values()):,} elements per side "
          f"| {spread(numeric, '.3f', ' s', count=True)} | <= 0.5 s |")
    print(f"| Compare tab recolour on a tolerance change (same GPT-2 diff, default view) | "
          f"{recolour[1]} boxes | {spread(recolour[0], '.3f', ' s', count=True)} | <= 0.2 s |")


def recolour_times(model, ids, result, repeats: int) -> tuple[list[float], int]:
    """Seconds the Compare tab takes to re-judge and recolour on a tolerance change (no browser)."""
    from app.sources import Loaded
    from app.state import ExplorerState
    from app.views.compare import ComparePanel

    panel = ComparePanel(state=ExplorerState(Loaded(result[0], "bench", "factory", "bench", model=model,
                                                    inputs=(ids,))))
    panel.show(result)
    tolerances = itertools.cycle([1e-2, 1e-3])
    times = sample_seconds(lambda: panel.set_tolerance(next(tolerances)), repeats, warmup=1)
    return times, len(panel.layout.nodes)


if __name__ == "__main__":
    main()
