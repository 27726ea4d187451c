"""Capture overhead: bare forward vs capture with every activation saved, as ratios in one run.

Run: `python tests/bench/bench_capture.py` (add the public torchlens package to the environment to
measure it side by side). Prints a markdown table for docs/benchmarks.md.
"""
from __future__ import annotations

import os
import platform
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tracer  # noqa: E402
from tests.bench._timing import interleaved_medians, torchlens_or_none  # noqa: E402


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config()).eval(), (torch.randint(0, 50257, (1, 8)),), "GPT-2 small, 8 ids"


def resnet50():
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    cfg = ResNetConfig(depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], layer_type="bottleneck")
    return ResNetModel(cfg).eval(), (torch.randn(1, 3, 224, 224),), "ResNet-50 shape, 1x3x224x224"


def main() -> None:
    repeats = int(os.environ.get("BENCH_REPEATS", "9"))
    tl = torchlens_or_none()
    torch.set_grad_enabled(True)
    rows = []
    for build in (gpt2_small, resnet50):
        model, args, name = build()
        fns = {
            "bare": lambda: model(*args),
            "ours": lambda: tracer.trace(model, args),
        }
        if tl is not None:
            fns["torchlens"] = lambda: tl.trace(model, list(args))  # its default keeps every activation
        med = interleaved_medians(fns, repeats=repeats)
        n_ops = len(tracer.trace(model, args, capture=tracer.CaptureOptions(save="none")))
        rows.append((name, n_ops, med))
    print(f"torch {torch.__version__}, python {platform.python_version()}, {os.cpu_count()} cores, "
          f"torchlens {getattr(tl, '__version__', 'not installed')}")
    print()
    print("| model | ops | bare forward | capture, all saved | ratio | torchlens | torchlens ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, n_ops, med in rows:
        tl_t = med.get("torchlens")
        tl_cols = f"{tl_t * 1e3:.1f} ms | {tl_t / med['bare']:.1f}x" if tl_t else "- | -"
        print(f"| {name} | {n_ops} | {med['bare'] * 1e3:.1f} ms | {med['ours'] * 1e3:.1f} ms | "
              f"{med['ours'] / med['bare']:.2f}x | {tl_cols} |")


if __name__ == "__main__":
    main()
