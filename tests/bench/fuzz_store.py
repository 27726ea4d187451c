"""Fuzz the trace store on demand: N seeded mutated trace folders through load, summary, layout and
Model Explorer export; counts loaded / refused (by code) / untyped, and prints every untyped case.

Run: `python tests/bench/fuzz_store.py --n 10000 [--seed 0]` (exit status 1 if any case is untyped).
The test suite runs a seeded sample of the same mutations (tests/tracer/test_store_fuzz.py).
"""
from __future__ import annotations

import argparse
import collections
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.tracer._store_fuzz import base_traces, fuzz  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="number of mutated folders")
    parser.add_argument("--seed", type=int, default=0, help="first seed (seeds are consecutive)")
    args = parser.parse_args()
    results: collections.Counter = collections.Counter()
    codes: collections.Counter = collections.Counter()
    untyped = []
    start = time.perf_counter()

    def on_case(outcome) -> None:
        results[outcome.result] += 1
        if outcome.result == "refused":
            codes[outcome.detail] += 1
        elif outcome.result == "untyped":
            untyped.append(outcome)
            print(f"UNTYPED seed {outcome.seed}: {outcome.mutation}\n{outcome.detail}", flush=True)
        done = sum(results.values())
        if done % 1000 == 0:
            print(f"  {done:,} folders, {time.perf_counter() - start:.0f} s: {dict(results)}", flush=True)

    with tempfile.TemporaryDirectory(prefix="tlx-fuzz-") as work:
        fuzz(base_traces(Path(work)), Path(work), range(args.seed, args.seed + args.n), on_case)
    elapsed = time.perf_counter() - start
    print(f"\n{args.n:,} fuzzed trace folders (seeds {args.seed}..{args.seed + args.n - 1}), python "
          f"{platform.python_version()}, {os.cpu_count()} cores, {elapsed:.0f} s")
    print(f"loaded and rendered: {results['loaded']:,}   refused typed: {results['refused']:,}   "
          f"untyped: {results['untyped']:,}")
    for code, n in codes.most_common():
        print(f"  {n:6,}  {code}")
    return 1 if untyped else 0


if __name__ == "__main__":
    sys.exit(main())
