"""Two checkouts' capture ratios in alternating processes: what a change to the capture bought.

Run: `python tests/bench/bench_checkouts.py OLD_TREE NEW_TREE [--case gpt2|8b|loop] [--pairs 3] [--reps 15]`
(a tree is a checkout's root, e.g. one made by `git worktree add /tmp/old <commit>`). Each process
imports `tracer` from its tree, runs with one torch thread, and prints the median CPU time
(`time.process_time`) of the bare forward and of the capture, taken in turns after one warm-up, and
their ratio: the processes alternate old, new, old, new... so a machine that changes speed between
minutes moves both sides alike. Cases: GPT-2 small on 8 ids (`save="none"`), the shipped Llama-3.1-8B
config weights-free, and a 10,000-op `tanh` loop (`save="none"`).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

_CHILD = r'''
import statistics, sys, time
tree, case, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
import torch
torch.set_num_threads(1)
import tracer
none = tracer.CaptureOptions(save="none")
if case == "gpt2":
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.randint(0, 50257, (1, 8))
    capture, bare = (lambda: tracer.trace(model, (ids,), capture=none)), (lambda: model(ids))
elif case == "8b":
    from tracer.bridges.transformers import build_meta_model, load_config, trace_ids
    model = build_meta_model(load_config("llama-3.1-8b"))
    ids = torch.zeros((1, 8), dtype=torch.long, device="meta")
    capture, bare = (lambda: trace_ids(model, (1, 8))), (lambda: model(ids))
else:
    sys.path.insert(0, ".")
    from tests.models import TanhLoop
    torch.manual_seed(0)
    model, x = TanhLoop(3333).eval(), torch.randn(2, 4)
    capture, bare = (lambda: tracer.trace(model, (x,), capture=none)), (lambda: model(x))
b, c = [], []
with torch.no_grad():
    capture(); bare()
    for _ in range(reps):
        s = time.process_time(); bare(); b.append(time.process_time() - s)
        s = time.process_time(); capture(); c.append(time.process_time() - s)
mb, mc = statistics.median(b), statistics.median(c)
print(f"{mb * 1e3:.2f} {mc * 1e3:.2f}")
'''


def run(tree: str, case: str, reps: int) -> tuple[float, float]:
    """(bare, capture) median CPU milliseconds of one process importing tracer from `tree`."""
    out = subprocess.run([sys.executable, "-c", _CHILD, tree, case, str(reps)], capture_output=True, text=True,
                         check=True)
    bare, capture = out.stdout.split()[-2:]
    return float(bare), float(capture)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--case", default="gpt2", choices=("gpt2", "8b", "loop"))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ns = ap.parse_args()
    print(f"{ns.case}: medians of {ns.reps} per process, one torch thread, CPU ms; {time.strftime('%H:%M:%S')}")
    print("| pair | tree | bare | capture | beyond bare | ratio |\n|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {"old": [], "new": []}
    for pair in range(1, ns.pairs + 1):
        for side, tree in (("old", ns.old), ("new", ns.new)):
            bare, capture = run(tree, ns.case, ns.reps)
            ratios[side].append(capture / bare)
            print(f"| {pair} | {side} | {bare:.2f} | {capture:.2f} | {capture - bare:.2f} | {capture / bare:.3f} |")
    print(f"median ratio: old {statistics.median(ratios['old']):.3f}, new {statistics.median(ratios['new']):.3f}")


if __name__ == "__main__":
    main()
