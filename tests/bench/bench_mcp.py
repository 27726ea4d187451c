"""What an agent waits for from `torchlens-explore mcp`: spawn to `initialize` (startup), then the first
`open_trace` of the 8B config and each tool after it, over stdio with the MCP SDK's own client.

    .venv/bin/python tests/bench/bench_mcp.py [--runs 5] [--idle 0]

Each run is a fresh server process. The server imports torch, transformers and the shipped models'
modules before it answers `initialize` (`app.mcp_server.warm_imports`), so that cost is startup;
`--no-warm-imports` serves at once and the first open pays it. `--idle S` waits S seconds after
`initialize` before the first call; 0 (the default) calls at once. Runs alternate between the two
modes, so drift in a shared host's load hits both alike. Prints medians with min-max over the runs of
the wall seconds the client waits and of the server process's CPU seconds over the same span (from
/proc, Linux only: on shared cores the steadier figure), the slowest tool of each run, and the load
average before and after.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import spread  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "torchlens-explore"
OPEN = ("open_trace", {"source": "llama-3.1-8b"})
CALLS = [("summarize", {}), ("find_ops", {"query": "softmax"}), ("describe_op", {"site": "model.layers.0.self_attn.q_proj"}),
         ("check_plan", {"plan": [{"site": "model.layers.0.mlp", "shape": [4096], "dtype": "bfloat16"}]}),
         ("read_ladder", {}), ("doctor", {}), ("agent_document", {}), ("explain", {"max_tokens": 2000}), ("api_map", {})]
STARTUP, FIRST_OPEN, SLOWEST = "startup (spawn to initialize answered)", "open_trace llama-3.1-8b (first)", "slowest tool of the run"


def server_cpu_seconds() -> float:
    """User + system CPU seconds of this process's children (the one server), from /proc; NaN elsewhere."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # a process that ended while listed
                continue
            if int(fields[1]) == os.getpid():  # ppid
                total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    except (OSError, IndexError, ValueError):
        return float("nan")
    return total


async def one_run(idle: float, warm: bool) -> tuple[dict[str, float], dict[str, float]]:
    """Wall and server CPU seconds of startup and of each call."""
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    start = time.perf_counter()
    params = StdioServerParameters(command=str(CLI), args=["mcp"] + ([] if warm else ["--no-warm-imports"]), cwd=str(ROOT))
    async with stdio_client(params) as streams, ClientSession(*streams) as session:
        await session.initialize()
        wall[STARTUP], cpu[STARTUP] = time.perf_counter() - start, server_cpu_seconds()
        await anyio.sleep(idle)
        for name, arguments in [OPEN, *CALLS]:
            key = FIRST_OPEN if (name, arguments) == OPEN else name
            t, c = time.perf_counter(), server_cpu_seconds()
            result = await session.call_tool(name, arguments)
            wall[key], cpu[key] = time.perf_counter() - t, server_cpu_seconds() - c
            if result.is_error:
                raise SystemExit(f"{name} failed: {result.content[0].text[:300]}")
    for times in (wall, cpu):
        times[SLOWEST] = max(v for k, v in times.items() if k != STARTUP)
    return wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--idle", type=float, default=0.0)
    ns = p.parse_args()
    load_before = os.getloadavg()
    runs: dict[bool, list[tuple[dict[str, float], dict[str, float]]]] = {True: [], False: []}
    for _ in range(ns.runs):
        for warm in (True, False):
            runs[warm].append(anyio.run(one_run, ns.idle, warm))
    load_after = os.getloadavg()
    print(f"conditions: {platform.platform()}, {os.cpu_count()} CPUs, load average (1/5/15 min) before "
          f"{'/'.join(f'{x:.2f}' for x in load_before)}, after {'/'.join(f'{x:.2f}' for x in load_after)}, "
          f"python {platform.python_version()}, {ns.runs} runs each, idle after initialize {ns.idle} s; seconds, median (min-max)")
    for warm, label in ((True, "warm-up before initialize (default)"), (False, "--no-warm-imports")):
        print(label)
        print(f"  {'':40s} {'wall (client waits)':26s} server CPU")
        for key in runs[warm][0][0]:
            print(f"  {key:40s} {spread([w[key] for w, _ in runs[warm]], fmt='.3f'):26s} "
                  f"{spread([c[key] for _, c in runs[warm]], fmt='.3f')}")


if __name__ == "__main__":
    main()
