"""Forward validation of GPT-2 small: time vs the bare forward, peak RSS vs the capture's.

Plain script (no assertions): `python tests/bench/bench_validate.py [--repeats N]`. Times are
medians measured side by side in one process; peak RSS is measured per case in a fresh
subprocess (VmHWM, reset after the model is built). Public TorchLens is measured too when it is installed.
Targets: validation <= 5x the bare forward (issue 11); validation peak RSS <= 1.5x the capture's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _model():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.randint(0, 50257, (1, 8), generator=torch.Generator().manual_seed(0))
    return model, ids


def _cases(model, ids):
    import torch

    import tracer
    from tracer.replay.validate import validate

    def bare():
        with torch.no_grad():
            model(ids)

    def capture():
        tracer.trace(model, (ids,))

    holder = {}

    def validation():  # capture outside the timing, validation inside
        assert validate(holder["t"])

    def torchlens():
        import torchlens as tl

        tl.validate(model, [ids], scope="forward")  # public TorchLens' own forward validation (2.x API)

    return {"bare": bare, "capture": capture, "validate": validation, "torchlens_validate": torchlens}, holder


def _has_torchlens() -> bool:
    try:
        import torchlens  # noqa: F401
    except Exception:
        return False
    return True


def _rss_child(case: str) -> None:
    from tests.bench._memory import reset_peak, status_kb

    model, ids = _model()
    cases, holder = _cases(model, ids)
    reset_peak()  # the model's construction is not part of any case
    before = status_kb("VmRSS")
    if case == "validate":
        import tracer

        holder["t"] = tracer.trace(model, (ids,))  # validation needs its capture: both count
    cases[case]()
    peak = status_kb("VmHWM")
    print(json.dumps({"case": case, "peak_mb": peak / 1024, "before_mb": before / 1024}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rss-child")
    a = ap.parse_args()
    if a.rss_child:
        _rss_child(a.rss_child)
        return
    import torch

    import tracer

    model, ids = _model()
    cases, holder = _cases(model, ids)
    names = ["bare", "capture", "validate"] + (["torchlens_validate"] if _has_torchlens() else [])
    times: dict[str, list[float]] = {n: [] for n in names}
    cases["bare"]()  # warm-up
    for _ in range(a.repeats):
        for n in names:
            if n == "validate":
                holder["t"] = tracer.trace(model, (ids,))
            start = time.perf_counter()
            cases[n]()
            times[n].append(time.perf_counter() - start)
            holder.pop("t", None)
    med = {n: statistics.median(v) for n, v in times.items()}
    rss, grown = {}, {}
    for n in names:
        out = subprocess.run([sys.executable, __file__, "--rss-child", n], capture_output=True, text=True)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        got = json.loads(line[-1]) if line else {"peak_mb": float("nan"), "before_mb": float("nan")}
        rss[n] = got["peak_mb"]
        grown[n] = got["peak_mb"] - got["before_mb"]  # high-water growth during the case itself
    print(f"GPT-2 small (GPT2Config()), 8 ids, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"median of {a.repeats}")
    print()
    print("| case | median s | x bare forward | peak RSS MB | x capture RSS | peak growth in case MB |")
    print("|---|---|---|---|---|---|")
    for n in names:
        print(f"| {n} | {med[n]:.4f} | {med[n] / med['bare']:.1f} | {rss[n]:.0f} | {rss[n] / rss['capture']:.2f} "
              f"| {grown[n]:.0f} |")
    if "torchlens_validate" not in names:
        print("\npublic TorchLens: not installed here (not measured)")
    print(f"\ntargets: validate <= 5x bare -> {med['validate'] / med['bare']:.1f}x; "
          f"validate peak RSS <= 1.5x capture -> {rss['validate'] / rss['capture']:.2f}x")


if __name__ == "__main__":
    main()
