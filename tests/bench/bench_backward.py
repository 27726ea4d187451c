"""The backward pass: GPT-2 small forward+backward capture against the bare forward+backward, and the
weights-free Llama-3.1-8B training-memory table at 4,096 tokens.

Run: `python tests/bench/bench_backward.py [--repeats 5]`. GPT-2 small with random weights (seeded),
input 1x128, loss = logits.sum(); the bare side is `model(ids).logits.sum().backward()`, the captured
side `tracer.trace(..., capture=CaptureOptions(backward=True), loss=...)` with every op-output gradient
saved (`save_grads="all"`) and values saved. Gradients are zeroed between runs. The 8B row is
`trace_training_step("llama-3.1-8b", (1, 4096))` plus `training_memory`, with and without activation
checkpointing, after one warm-up at (1, 64) (transformers imported before timing). Medians with the
range; the load average is printed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench._timing import spread  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import tracer
    from tracer.backward.memory import training_memory
    from tracer.bridges.transformers import trace_training_step
    from tracer.options import CaptureOptions

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.randint(0, 50257, (1, 128))
    bare, captured = [], []
    for _ in range(args.repeats + 1):  # the first pair is a warm-up
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        model(ids).logits.sum().backward()
        bare.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        tracer.trace(model, (ids,), capture=CaptureOptions(backward=True), loss=lambda o: o.logits.sum())
        captured.append(time.perf_counter() - t0)
    bare, captured = bare[1:], captured[1:]
    ratio = statistics.median(captured) / statistics.median(bare)
    print(f"load average {os.getloadavg()[0]:.1f}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"| GPT-2 small fwd+bwd, 1x128 | bare {spread(bare, unit=' s')} | captured {spread(captured, unit=' s')} | ratio {ratio:.2f}x |")
    trace_training_step("llama-3.1-8b", (1, 64))
    for ck in (False, True):
        xs = []
        for _ in range(3):
            t0 = time.perf_counter()
            mem = training_memory(trace_training_step("llama-3.1-8b", (1, 4096), checkpointing=ck))
            xs.append(time.perf_counter() - t0)
        print(f"| Llama-3.1-8B weights-free step, 1x4096, checkpointing {ck} | {spread(xs, unit=' s')} | "
              f"saved {mem.total_saved_bytes / 2**30:.2f} GiB, parameters {mem.total_param_bytes / 2**30:.2f} GiB |")


if __name__ == "__main__":
    main()
