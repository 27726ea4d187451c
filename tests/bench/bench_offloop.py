"""Which way of laying out a big view frees the server's event loop (issue 39, fair sessions): the dense-edge
trace (tests/bench/dense_edges.py, 452 ops, 11,626 edges) laid out whole, cold, while a ticker on an asyncio
loop asks to run every 10 ms; the ticker's lateness is what another session's callback waits.

    .venv/bin/python tests/bench/dense_edges.py /tmp/dense
    .venv/bin/python tests/bench/bench_offloop.py /tmp/dense [--runs 3]

`inline`: on the loop (as before issue 39). `thread`: `app.offloop.OffLoop` (the app's way). `process`:
`app.worker.run_task("layout")` on a worker thread (a spare child, nice 19, loads the trace and lays it out;
its JSON result is parsed by `run_task` off the loop, and turned back into boxes nowhere: a lower bound).
Prints, per way, the layout's wall time and the ticker's lateness median (min-max over runs) of each run's
p50, p90 and max. Nothing here is asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench._timing import spread  # noqa: E402

TICK_S = 0.01


async def _measure(way: str, state, folder: str) -> tuple[float, list[float]]:
    """(seconds the layout took, the ticker's lateness in ms per tick while it ran)."""
    from app import worker
    from app.offloop import OffLoop

    loop = asyncio.get_running_loop()
    everything = sorted(frozenset(state.trace.modules) | {""})
    engine = copy.copy(state.engine)
    engine.cache, engine.placements, engine.shapes = {}, {}, {}
    late: list[float] = []
    finished = asyncio.Event()
    began = time.perf_counter()
    if way == "inline":
        loop.call_soon(lambda: (engine.layout(everything), finished.set()))
    elif way == "thread":
        OffLoop(bound_s=600).submit(lambda: engine.layout(everything), lambda _r, _s: finished.set(),
                                    over=lambda _s: finished.set(), failed=lambda e: finished.set(),
                                    deliver=loop.call_soon_threadsafe)
    else:
        work = loop.run_in_executor(None, lambda: worker.run_task("layout", {"trace": folder, "expanded": everything},
                                                                  lambda _f, _t: None, site="bench_offloop"))
        work.add_done_callback(lambda _f: finished.set())
    while not finished.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(TICK_S)
        late.append((time.perf_counter() - asked - TICK_S) * 1000)
    return time.perf_counter() - began, late


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a saved trace folder (tests/bench/dense_edges.py writes one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ways", default="inline,thread,process")
    args = parser.parse_args()
    from app import worker
    from app.sources import open_path
    from app.state import ExplorerState

    state = ExplorerState(open_path(args.trace))
    worker.warm()
    time.sleep(20)  # the spare child's imports done before the first process run
    ways = args.ways.split(",")
    rows: dict[str, dict[str, list[float]]] = {w: {"took_s": [], "p50": [], "p90": [], "max": []} for w in ways}
    load0 = os.getloadavg()[0]
    for run in range(args.runs):  # interleaved: drift in the machine's load hits every way alike
        for way in ways:
            took, late = asyncio.run(_measure(way, state, args.trace))
            late.sort()
            row = rows[way]
            row["took_s"].append(took)
            row["p50"].append(statistics.median(late))
            row["p90"].append(late[int(0.9 * (len(late) - 1))])
            row["max"].append(late[-1])
            print(f"{way} run {run}: layout {took:.2f} s, {len(late)} ticks, lateness p90 {row['p90'][-1]:.0f} ms, "
                  f"max {row['max'][-1]:.0f} ms, load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\nload (1 min) {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end; {os.cpu_count()} cores; "
          f"{args.runs} runs; median (min-max)\n")
    print("| way | layout (s) | tick lateness p50 (ms) | p90 (ms) | max (ms) |")
    print("|---|---|---|---|---|")
    for way, row in rows.items():
        print(f"| {way} | {spread(row['took_s'], '.2f')} | {spread(row['p50'], '.0f')} | {spread(row['p90'], '.0f')} | "
              f"{spread(row['max'], '.0f')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
