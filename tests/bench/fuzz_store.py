"""Fuzz the trace store on demand: N seeded mutated trace folders through load, summary, layout, the Model
Explorer export, the HTML page and the snapshot figures (SVG and PNG); counts loaded / refused (by code) /
untyped / hung, and prints every untyped case and every case over the hang bound.

Run: `python tests/bench/fuzz_store.py --n 10000 [--seed 0] [--results fuzz.jsonl] [--workers 1]`
(exit status 1 if any case is untyped or hung). Cases run in child processes of `--chunk` seeds each; every
finished case is appended to `--results` (one JSON line), so a rerun with the same file resumes where the
last one stopped. A case past `--kill-s` has its child killed and is recorded as hung; the next child starts
after it. Each line carries the case's seconds and the child's peak RSS so far.
The test suite runs a seeded sample of the same mutations (tests/tracer/test_store_fuzz.py).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

STAGES = ("load", "summary", "layout", "model_explorer", "html", "svg", "png")


def run_case(folder: Path, out: Path) -> tuple[str, str]:
    """The suite's stages on `folder` (`tests.tracer._store_fuzz.run_case`: load, summary, layout, the Model
    Explorer graph in memory) and, if it loads, the writers into `out`: ("loaded"|"refused"|"untyped",
    detail naming the stage)."""
    import tracer
    from exporters import figures
    from exporters.html import write_html
    from exporters.model_explorer import export
    from tests.tracer._store_fuzz import run_case as load_and_render
    from tracer.errors import TracerError

    result, detail = load_and_render(folder)
    if result != "loaded":
        return result, detail
    stage = "load"
    try:
        trace = tracer.load(str(folder))
        stage = "model_explorer"
        export(trace, out / "me.json")
        stage = "html"
        write_html(trace, out / "page.html")
        stage = "svg"
        figures.export_svg(trace, out / "fig.svg")
        stage = "png"
        figures.export_png(trace, out / "fig.png", dpi=72)
    except TracerError as exc:
        return "refused", f"{stage}: {exc.code}"
    except Exception:  # noqa: BLE001 - the point: anything untyped is a finding
        return "untyped", f"{stage}: {traceback.format_exc(limit=-3)}"
    return "loaded", ""


def child(seeds: list[int], results: Path) -> int:
    """Run `seeds` in this process, appending one JSON line per finished case to `results`."""
    import shutil

    from tests.tracer._store_fuzz import base_traces, mutate_folder
    import random

    with tempfile.TemporaryDirectory(prefix="tlx-fuzz-") as tmp:
        work = Path(tmp)
        bases = base_traces(work / "bases")
        beat = Path(f"{results}.current")
        with results.open("a") as log:
            for seed in seeds:
                beat.write_text(f"seed {seed}")
                rng = random.Random(seed)
                base = bases[seed % len(bases)]
                folder, out = work / f"case-{seed}", work / f"out-{seed}"
                out.mkdir()
                started = time.perf_counter()
                try:
                    mutation = f"{base.name}: {mutate_folder(rng, base, folder)}"
                except Exception:  # noqa: BLE001 - a harness failure is reported, not counted as the store's
                    mutation, result, detail = "mutator failed", "harness", traceback.format_exc(limit=-3)
                else:
                    result, detail = run_case(folder, out)
                seconds = time.perf_counter() - started
                peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                log.write(json.dumps({"seed": seed, "mutation": mutation, "result": result, "detail": detail,
                                      "seconds": round(seconds, 3), "peak_rss_mb": round(peak_mb, 1)}) + "\n")
                log.flush()
                for path in work.glob(f"*-{seed}*"):
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return 0


def _done(results: Path) -> dict[int, dict]:
    rows = {}
    if results.exists():
        for line in results.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            rows[row["seed"]] = row
    return rows


def drive(seeds: list[int], results: Path, chunk: int, kill_s: float, nice: int) -> None:
    """Run the seeds not yet in `results` in children of `chunk` seeds; a child that stays on one case (or on
    building its base traces) for `kill_s` is killed and that case recorded as hung."""
    todo = [s for s in seeds if s not in _done(results)]
    beat = Path(f"{results}.current")
    failures = 0
    while todo:
        batch, todo = todo[:chunk], todo[chunk:]
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--results", str(results),
               "--seeds", ",".join(map(str, batch))]
        beat.write_text("starting")
        proc = subprocess.Popen(cmd, cwd=ROOT, preexec_fn=(lambda: os.nice(nice)) if nice else None,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        killed = False
        while proc.poll() is None:
            time.sleep(1.0)
            if time.time() - beat.stat().st_mtime > kill_s:
                proc.kill()
                killed = True
        proc.wait()
        err = proc.stderr.read() if proc.stderr else ""
        finished = _done(results)
        left = [s for s in batch if s not in finished]
        if left and beat.read_text() == "starting":  # died before its first case (imports, base traces)
            failures += 1
            if failures >= 3:
                raise SystemExit(f"the fuzz child failed to start three times:\n{err[-2000:]}")
            todo = left + todo
            continue
        if left:  # the child died or was killed on left[0]: record it, requeue the rest
            with results.open("a") as log:
                log.write(json.dumps({"seed": left[0], "mutation": beat.read_text(),
                                      "result": "hung" if killed else "crashed", "detail": err[-2000:],
                                      "seconds": kill_s if killed else None, "peak_rss_mb": None}) + "\n")
            todo = left[1:] + todo
        print(f"  {len(_done(results)):,} folders done, {len(todo):,} to go "
              f"({time.strftime('%H:%M:%S')})", flush=True)


def report(seeds: list[int], results: Path, hang_s: float, elapsed: float) -> int:
    rows = _done(results)
    rows = [rows[s] for s in seeds if s in rows]
    counts = collections.Counter(r["result"] for r in rows)
    codes = collections.Counter(r["detail"] for r in rows if r["result"] == "refused")
    slow = [r for r in rows if r["result"] == "hung" or (r["seconds"] or 0) > hang_s]
    bad = [r for r in rows if r["result"] in ("untyped", "crashed", "harness")]
    for r in bad:
        print(f"{r['result'].upper()} seed {r['seed']}: {r['mutation']}\n{r['detail']}")
    for r in slow:
        print(f"SLOW seed {r['seed']} ({r['seconds']} s, {r['result']}): {r['mutation'][:200]}")
    peak = max((r["peak_rss_mb"] or 0) for r in rows) if rows else 0
    secs = sorted(r["seconds"] for r in rows if r["seconds"] is not None)
    print(f"\n{len(rows):,} of {len(seeds):,} fuzzed trace folders (seeds {seeds[0]}..{seeds[-1]}), stages "
          f"{', '.join(STAGES)}; python {platform.python_version()}, {os.cpu_count()} cores, this run {elapsed:.0f} s")
    print(f"loaded and rendered: {counts['loaded']:,}   refused typed: {counts['refused']:,}   "
          f"untyped: {counts['untyped']:,}   crashed: {counts['crashed']:,}   hung: {counts['hung']:,}   "
          f"over {hang_s:g} s: {len(slow):,}")
    if secs:
        print(f"case seconds: median {secs[len(secs) // 2]:.3f}, max {secs[-1]:.2f}; summed {sum(secs):.0f} s; "
              f"peak RSS of a child {peak:.0f} MB")
    by_stage = collections.Counter(d.split(": ", 1)[0] for d in codes.elements())
    print("refusals by stage: " + ", ".join(f"{k} {v:,}" for k, v in by_stage.most_common()))
    for code, n in codes.most_common():
        print(f"  {n:6,}  {code}")
    return 1 if bad or slow else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="number of mutated folders")
    parser.add_argument("--seed", type=int, default=0, help="first seed (seeds are consecutive)")
    parser.add_argument("--results", default=None, help="JSON-lines results file (resumable); default a temp file")
    parser.add_argument("--chunk", type=int, default=500, help="seeds per child process")
    parser.add_argument("--workers", type=int, default=1, help="children at once (each on its own seeds)")
    parser.add_argument("--hang-s", type=float, default=20.0, help="a case slower than this is reported")
    parser.add_argument("--kill-s", type=float, default=120.0, help="a case silent this long is killed, hung")
    parser.add_argument("--nice", type=int, default=0, help="niceness added to the children")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seeds", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child([int(s) for s in args.seeds.split(",") if s], Path(args.results))
    results = Path(args.results) if args.results else Path(tempfile.mkstemp(prefix="tlx-fuzz-", suffix=".jsonl")[1])
    print(f"results: {results}", flush=True)
    seeds = list(range(args.seed, args.seed + args.n))
    start = time.perf_counter()
    if args.workers <= 1:
        drive(seeds, results, args.chunk, args.kill_s, args.nice)
    else:
        import threading

        parts = [Path(f"{results}.w{k}") for k in range(args.workers)]
        threads = [threading.Thread(target=drive, args=(seeds[k::args.workers], parts[k], args.chunk, args.kill_s,
                                                        args.nice)) for k in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with results.open("a") as out:
            for part in parts:
                out.write(part.read_text())
    return report(seeds, results, args.hang_s, time.perf_counter() - start)


if __name__ == "__main__":
    sys.exit(main())
