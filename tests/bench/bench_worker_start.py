"""What a heavy job pays to get its child process: forked from the warmed zygote, or a fresh interpreter.

Each mode runs in its own process: one untimed job (the zygote does its imports), then N
`probe` jobs back to back (`app.worker.run_task`), timing each job from the call to its result. At the end it
stops the zygote (so every child's CPU has been reaped into this process) and reports the CPU time of the
whole tree (this process and all it started, user + system) per job.

- `zygote`: today's path (`app.worker_zygote`): each job is a fork of the process that did the imports.
- `interpreter`: the zygote made unavailable, so each job starts `python -m app.worker` and waits for its
  imports (what a job paid when no spare child was ready, e.g. the second of two quick actions, before the
  zygote).

Run: `python tests/bench/bench_worker_start.py [--jobs 8] [--repeats 3]`. Prints the medians and spreads.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def run_mode(mode: str, jobs: int) -> dict:
    import app.worker as worker

    if mode == "interpreter":
        def unavailable(*_a, **_k):
            raise OSError("zygote off for this benchmark")
        worker.Zygote = unavailable
    worker.run_task("probe", {}, lambda f, t: None, site="bench")  # not timed: the zygote's own imports
    cpu0 = _tree_cpu()
    walls = []
    for _ in range(jobs):
        t0 = time.perf_counter()
        worker.run_task("probe", {}, lambda f, t: None, site="bench")
        walls.append(time.perf_counter() - t0)
    if worker._ZYGOTE is not None:
        worker._ZYGOTE.stop()
    return {"walls": walls, "cpu_per_job": (_tree_cpu() - cpu0) / jobs}


def _tree_cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode")  # internal: run one mode here and print its JSON
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.jobs)))
        return 0
    results: dict[str, list[dict]] = {"zygote": [], "interpreter": []}
    for _ in range(args.repeats):
        for mode in results:  # side by side, alternating
            out = subprocess.run([sys.executable, __file__, "--mode", mode, "--jobs", str(args.jobs)], cwd=ROOT,
                                 capture_output=True, text=True, check=True)
            results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    from tests.bench._timing import spread

    for mode, runs in results.items():
        walls = [w for r in runs for w in r["walls"]]
        print(f"{mode:12s} job wall {spread(walls, '.3f', ' s')}, CPU per job {spread([r['cpu_per_job'] for r in runs], unit=' s')}; "
              f"{args.repeats} runs x {args.jobs} jobs (median (min-max))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
