"""Structure-only capture of the shipped Llama-3.1-8B and 405B configs: wall time and peak RSS added.

Run: `python tests/bench/bench_weights_free.py` (BENCH_REPEATS=3 by default). Each case runs in a
fresh subprocess: build the meta model, reset the peak-RSS mark (/proc/self/clear_refs), time the
first capture and then the median of warm ones, and report the peak RSS added over construction.
Public TorchLens is measured the same way where it is installed. Prints a markdown table.
Targets: 8B <= 1.0 s and +100 MB; 405B <= 10 s and +1 GB.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench._memory import reset_peak as _reset_peak, status_kb as _status_kb  # noqa: E402

CASES = {"llama-3.1-8b": (1.0, 100), "llama-3.1-405b": (10.0, 1000)}


def worker(case: str, tool: str, repeats: int) -> dict:
    """One case in this process: construct, then capture; returns the measurements."""
    import torch

    from tracer.bridges.transformers import build_meta_model, load_config, trace_ids

    t0 = time.perf_counter()
    model = build_meta_model(load_config(case))
    construct_s = time.perf_counter() - t0
    ids = torch.zeros((1, 8), dtype=torch.long, device="meta")
    if tool == "ours":
        run = lambda: trace_ids(model, (1, 8))  # noqa: E731
    else:
        from tests.bench._timing import torchlens_or_none

        tl = torchlens_or_none()
        run = lambda: tl.summary(model, [ids])  # noqa: E731  (its structure-only path on meta; tl.trace refuses meta)
    rss_before = _status_kb("VmRSS")
    reset = _reset_peak()
    t0 = time.perf_counter()
    result = run()
    first_s = time.perf_counter() - t0
    peak_added_mb = (_status_kb("VmHWM") - rss_before) / 1024
    warm = []
    forward_s = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run()
        warm.append(time.perf_counter() - t0)
        if tool == "ours":
            forward_s.append(result.provenance["capture_seconds"])
    out = {"case": case, "tool": tool, "construct_s": construct_s, "first_s": first_s,
           "warm_median_s": statistics.median(warm) if warm else first_s,
           "peak_rss_added_mb": peak_added_mb, "peak_reset": reset}
    if tool == "ours":
        out.update(ops=len(result), params=result.param_count(), session_forward_s=statistics.median(forward_s),
                   ladder=result.ladder_state)
    return out


def _run_case(case: str, tool: str, repeats: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", case, tool, str(repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"case": case, "tool": tool, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    from tests.bench._timing import torchlens_or_none

    repeats = int(os.environ.get("BENCH_REPEATS", "3"))
    tools = ["ours"] + (["torchlens"] if torchlens_or_none() is not None else [])
    rows = [_run_case(case, tool, repeats) for case in CASES for tool in tools]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    print("| config | tool | ops | construct (s) | first capture (s) | warm median (s) | of which forward (s) "
          "| peak RSS added (MB) | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        limit_s, limit_mb = CASES[r["case"]]
        if "error" in r:
            print(f"| {r['case']} | {r['tool']} | error: {r['error']} | | | | | | |")
            continue
        ok = r["first_s"] <= limit_s and r["peak_rss_added_mb"] <= limit_mb
        print(f"| {r['case']} | {r['tool']} | {r.get('ops', '?')} | {r['construct_s']:.2f} | {r['first_s']:.2f} | "
              f"{r['warm_median_s']:.2f} | {r.get('session_forward_s', float('nan')):.2f} | "
              f"{r['peak_rss_added_mb']:.0f} | <= {limit_s:g} s, {limit_mb} MB: {'met' if ok else 'MISSED'} |")
    if "torchlens" not in tools:
        print("\npublic TorchLens is not installed here: not measured side by side")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        main()
