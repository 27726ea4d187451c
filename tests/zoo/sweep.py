"""Run the zoo sweep and write its results JSON (and docs/zoo.md from it).

    python -m tests.zoo.sweep --out tests/zoo/results.json [--only llama,gpt2] [--limit 40] [--workers 2]
    python -m tests.zoo.sweep --only-unavailable --rows rerun.jsonl --skip-nn   # re-sweep where the forward did not run
    python -m tests.zoo.sweep --merge-rows rerun.jsonl      # those rows replace theirs in --out; docs regenerated
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "zoo" / "results.json"
FACTS = ROOT / "tracer" / "compat" / "zoo_facts.json"


def transformers_tasks(only: list[str] | None, limit: int | None) -> list[tuple]:
    from .hf import architectures, classes_of, sweep_class

    archs = [a for a in architectures() if not only or a in only][:limit]
    return [(sweep_class, (arch, cls)) for arch in archs for cls in classes_of(arch)]


def nn_tasks(only: list[str] | None) -> list[tuple]:
    from .nn_layers import LAYERS, sweep_layer

    return [(sweep_layer, (name,)) for name in sorted(LAYERS) if not only or name in only]


def conditions(workers: int) -> dict[str, Any]:
    """Versions and host of the run."""
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cpus": os.cpu_count(), "workers": workers,
            "threads_per_worker": 1, "host": f"{platform.system()} {platform.machine()}",
            "load_average_start": round(os.getloadavg()[0], 1)}


def write_outputs(results: dict[str, Any], docs: str, facts: str, *, full: bool) -> None:
    """docs/zoo.md, the doctor's zoo facts and (for a full sweep) the compat-matrix block, from `results`."""
    from .report import facts_text, render, with_compat_block

    if docs:
        Path(docs).write_text(render(results))
    if facts:
        Path(facts).write_text(facts_text(results))
    if docs and facts and full:
        matrix = ROOT / "docs" / "compat-matrix.md"
        matrix.write_text(with_compat_block(matrix.read_text(), results))


def unavailable(results: dict[str, Any]) -> list[str]:
    """Model types none of whose classes ran the plain forward in `results`."""
    from .report import hf_name, row_outcomes
    from .hf import COLUMNS

    ran = {hf_name(r)[0] for r in results.get("transformers", [])
           if row_outcomes(r, COLUMNS)["forward"]["result"] == "pass"}
    return sorted({hf_name(r)[0] for r in results.get("transformers", [])} - ran)


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--only", default="", help="comma-separated model types / layer names")
    parser.add_argument("--limit", type=int, default=None, help="first N transformers architectures")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit-s", type=float, default=45.0, help="wall-clock limit per task")
    parser.add_argument("--render-only", action="store_true",
                        help="do not sweep: regenerate docs/zoo.md, the doctor's facts and the matrix from --out")
    parser.add_argument("--skip-nn", action="store_true")
    parser.add_argument("--only-unavailable", action="store_true",
                        help="only the architectures whose plain forward did not run in --out")
    parser.add_argument("--rows", default="", help="append each transformers row to this JSON-lines file as it ends")
    parser.add_argument("--merge-rows", default="",
                        help="do not sweep: merge this JSON-lines file's rows into --out (tests.zoo.merge)")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--docs", default=str(ROOT / "docs" / "zoo.md"), help="write docs/zoo.md ('' to skip)")
    parser.add_argument("--facts", default=str(FACTS), help="write the doctor's zoo facts ('' to skip)")
    opts = parser.parse_args(argv)
    only = [s for s in opts.only.split(",") if s] or None
    if opts.only_unavailable:
        only = unavailable(json.loads(Path(opts.out).read_text()))
    if opts.merge_rows:
        from .merge import merge

        lines = [json.loads(line) for line in Path(opts.merge_rows).read_text().splitlines() if line.strip()]
        before = json.loads(Path(opts.out).read_text())
        cond = {**lines[0]["conditions"], "load_average_end": round(os.getloadavg()[0], 1), "merged_utc": _utc(),
                "planned_architectures": len(unavailable(before))}
        merged = merge(before, lines[1:], cond)
        Path(opts.out).write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
        write_outputs(merged, opts.docs, opts.facts, full=True)
        return 0
    if opts.render_only:
        write_outputs(json.loads(Path(opts.out).read_text()), opts.docs, opts.facts, full=True)
        return 0
    from .runner import run_tasks

    started = time.monotonic()
    results: dict[str, Any] = {"conditions": {**conditions(opts.workers), "limit_s_per_task": opts.limit_s}}
    done = [0]

    if opts.rows:
        Path(opts.rows).write_text(json.dumps({"conditions": {**results["conditions"], "started_utc": _utc()}}) + "\n")

    def progress(row: dict[str, Any]) -> None:
        if opts.rows and ("model_type" in row or len(row.get("task", [])) == 2):
            with open(opts.rows, "a") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        done[0] += 1
        if done[0] % 25 == 0:
            print(f"  {done[0]} rows, {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)

    if not opts.skip_transformers:
        results["transformers"] = run_tasks(transformers_tasks(only, opts.limit), workers=opts.workers,
                                            limit_s=opts.limit_s, on_row=progress)
    if not opts.skip_nn:
        results["torch_nn"] = run_tasks(nn_tasks(only), workers=opts.workers, limit_s=opts.limit_s, on_row=progress)
    results["conditions"]["wall_seconds"] = round(time.monotonic() - started, 1)
    results["conditions"]["load_average_end"] = round(os.getloadavg()[0], 1)
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    results["conditions"]["cpu_seconds"] = round(sum(u.ru_utime + u.ru_stime for u in used), 1)
    Path(opts.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    write_outputs(results, opts.docs, opts.facts, full=not only and opts.limit is None)
    print(f"wrote {opts.out} in {results['conditions']['wall_seconds']}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
