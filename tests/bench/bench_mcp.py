"""What an agent waits for from `torchlens-explore mcp`: spawn to `initialize`, the first `open_trace` of
the 8B config, and each tool after it, over stdio with the MCP SDK's own client.

    .venv/bin/python tests/bench/bench_mcp.py [--runs 5] [--idle 0]

Each run is a fresh server process. `--idle S` waits S seconds after `initialize` before the first
call (an agent reading the tool list first); 0 calls at once, the worst case for the import warm-up
the server starts when it opens nothing. Runs alternate with and without that warm-up. Prints medians with min-max over the runs and the conditions.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "torchlens-explore"
CALLS = [("summarize", {}), ("find_ops", {"query": "softmax"}), ("describe_op", {"site": "model.layers.0.self_attn.q_proj"}),
         ("read_ladder", {}), ("doctor", {}), ("agent_document", {})]


async def one_run(idle: float, warm: bool) -> dict[str, float]:
    times: dict[str, float] = {}
    start = time.perf_counter()
    params = StdioServerParameters(command=str(CLI), args=["mcp"] + ([] if warm else ["--no-warm-imports"]), cwd=str(ROOT))
    async with stdio_client(params) as streams, ClientSession(*streams) as session:
        await session.initialize()
        times["server up (spawn to initialize)"] = time.perf_counter() - start
        await anyio.sleep(idle)
        for name, arguments in [("open_trace", {"source": "llama-3.1-8b"}), *CALLS]:
            t = time.perf_counter()
            result = await session.call_tool(name, arguments)
            if result.is_error:
                raise SystemExit(f"{name} failed: {result.content[0].text[:300]}")
            times["open_trace llama-3.1-8b (first)" if name == "open_trace" else name] = time.perf_counter() - t
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--idle", type=float, default=0.0)
    ns = p.parse_args()
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(ns.runs):  # alternating, so drift in the host's load hits both alike
        for warm in (True, False):
            runs[warm].append(anyio.run(one_run, ns.idle, warm))
    print(f"conditions: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
          f"python {platform.python_version()}, runs {ns.runs} each, idle after initialize {ns.idle} s")
    for warm, label in ((True, "warm-up on (default)"), (False, "--no-warm-imports")):
        print(label)
        for key in runs[warm][0]:
            values = [r[key] for r in runs[warm]]
            print(f"  {key:40s} median {statistics.median(values):7.3f} s  (min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    main()
