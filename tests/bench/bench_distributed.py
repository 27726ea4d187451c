"""Distributed capture: a 2-rank tensor-parallel capture against its bare distributed forward, and the
weights-free Llama-3.1-405B on a simulated tp 8 x fsdp 8 mesh.

Run: `python tests/bench/bench_distributed.py [--repeats 5]`. Part one spawns 2 processes (gloo on
127.0.0.1, one intra-op thread each) running a Llama-architecture model at GPT-2 small's sizes
(hidden 768, 12 layers, 12 heads, MLP 3072, vocabulary 50,257; random weights) under
`parallelize_module` (q/k/v/gate/up colwise, o/down rowwise), input 1x128, `torch.no_grad()`: the bare
forward, `tracer.trace` with values saved (default) and with `save="none"`, interleaved, a barrier
before each run. GPT-2 itself is not used: its Conv1D layers have no tensor-parallel style in torch.
Part two runs `tracer.distributed.simulate("static/configs/llama-3.1-405b.json", tp=8, fsdp=8)` in a
fresh process: wall seconds (transformers imported first, not timed) and the process's peak RSS.
Medians with the range; the load average is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench._timing import spread  # noqa: E402

SIMULATE_405B = """
import resource, time, transformers
import tracer.distributed as td
start = time.perf_counter()
t = td.simulate("static/configs/llama-3.1-405b.json", tp=8, fsdp=8)
seconds = time.perf_counter() - start
d = t.provenance.distributed
print(f"RESULT {seconds:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} {len(t.ops)} "
      f"{d['collectives']} {d['parameter_bytes_per_rank']}")
"""



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-405b", action="store_true")
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()}")
    from tests.distributed.ranks import run_ranks

    os.environ["TLX_BENCH_REPEATS"] = str(args.repeats)
    with tempfile.TemporaryDirectory() as d:
        reports = run_ranks("bench_tp", Path(d), timeout=1800)
    for r in reports:
        t = r["times"]
        ratio = statistics.median(t["capture"]) / statistics.median(t["bare"])
        ratio_none = statistics.median(t["capture_save_none"]) / statistics.median(t["bare"])
        print(f"rank {r['rank']} ({r['threads']} thread): bare {spread(t['bare'], '.3f', ' s')}; capture {spread(t['capture'], '.3f', ' s')} "
              f"= {ratio:.2f}x; capture save=none {spread(t['capture_save_none'], '.3f', ' s')} = {ratio_none:.2f}x")
    if args.skip_405b:
        return
    out = subprocess.run([sys.executable, "-c", SIMULATE_405B], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=1800)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        print(out.stdout[-2000:], out.stderr[-2000:])
        return
    seconds, rss, ops, collectives, per_rank = line.split()[1:]
    print(f"405B simulated tp 8 x fsdp 8: {seconds} s, peak RSS {rss} MB, {ops} ops, {collectives} collectives, "
          f"{int(per_rank) / 2**30:.2f} GiB parameters per rank (estimate)")
    print(json.dumps({"load_average_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
