"""Run the PyTorch feature sweep (every case x every column, each cell in a fresh forked process) and
write its results JSON and docs/torch-features.md.

    python -m tests.features.sweep [--only compile_eager,hop_cond] [--workers 2] [--render-only]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # inductor compiles in the cell's own process

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "features" / "results.json"
DOCS = ROOT / "docs" / "torch-features.md"


def tasks(only: list[str] | None) -> list[tuple[float, tuple]]:
    """(per-cell limit, (run_cell, (case, column))) for every selected cell, in table order."""
    from .cases import CASES
    from .cells import COLUMNS, run_cell

    return [(case.limit_s, (run_cell, (case.name, column))) for case in CASES if not only or case.name in only
            for column in COLUMNS]


def conditions(workers: int) -> dict[str, Any]:
    import torch

    return {"torch": torch.__version__, "python": platform.python_version(), "cpus": os.cpu_count(),
            "workers": workers, "threads_per_worker": 1, "host": f"{platform.system()} {platform.machine()}",
            "cxx_compiler": bool(shutil.which("g++") or shutil.which("c++")),
            "load_average_start": round(os.getloadavg()[0], 1), **_tree()}


def _tree() -> dict[str, Any]:
    """The commit swept and whether tracer/ had uncommitted edits (the working tree is shared)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "tracer").splitlines() if line.strip()]
    return {"commit": git("rev-parse", "--short", "HEAD"), "tracer_uncommitted_files": len(dirty)}


def sweep(only: list[str] | None, workers: int) -> list[dict[str, Any]]:
    """Every selected cell's row, each in a fresh worker; cells with a longer limit run in their own batch."""
    from tests.zoo.runner import run_tasks

    selected = tasks(only)
    rows: dict[tuple, dict[str, Any]] = {}
    for limit in sorted({limit for limit, _ in selected}):
        batch = [task for lim, task in selected if lim == limit]
        for task, row in zip(batch, run_tasks(batch, workers=workers, limit_s=limit, fresh=True)):
            name, column = task[1]
            if "error" in row:  # a timeout or a crash of the cell's process
                row = {"case": name, "column": column, "result": "error", "code": "worker_error",
                       "reason": row["error"], "seconds": row.get("seconds")}
            row.pop("task", None)
            rows[(name, column)] = row
            print(f"  {name}.{column}: {row['result']} {row.get('code', '')}", file=sys.stderr, flush=True)
    return [rows[task[1]] for _, task in selected]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--docs", default=str(DOCS), help="write docs/torch-features.md ('' to skip)")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--render-only", action="store_true", help="do not sweep: render --docs from --out")
    opts = parser.parse_args(argv)
    from .report import render

    if opts.render_only:
        Path(opts.docs).write_text(render(json.loads(Path(opts.out).read_text())))
        return 0
    only = [s for s in opts.only.split(",") if s] or None
    started = time.monotonic()
    results: dict[str, Any] = {"conditions": conditions(opts.workers)}
    results["cells"] = sweep(only, opts.workers)
    cond = results["conditions"]
    cond["wall_seconds"] = round(time.monotonic() - started, 1)
    cond["load_average_end"] = round(os.getloadavg()[0], 1)
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cond["cpu_seconds"] = round(sum(u.ru_utime + u.ru_stime for u in used), 1)
    Path(opts.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    if opts.docs:
        Path(opts.docs).write_text(render(results))
    print(f"wrote {opts.out} in {cond['wall_seconds']}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
