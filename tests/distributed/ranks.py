"""Spawn N real processes on a gloo mesh over loopback, each running one scenario; collect their reports.

Every process is bounded: past the timeout all of them are killed and the run fails with their output.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenario: str, out_dir: Path, world_size: int = 2, timeout: float = 90.0) -> list[dict]:
    """Run `scenario` (a function in tests/distributed/workers.py) on `world_size` ranks; one report per rank."""
    return _spawn([scenario], scenario, out_dir, world_size, timeout, ["."])["."]


def run_batch(scenarios: dict[str, tuple[str, dict[str, str]]], out_dir: Path, world_size: int = 2,
              timeout: float = 180.0) -> dict[str, list[dict]]:
    """Run several scenarios, `key -> (scenario, environment variables)`, in turn in one spawn of `world_size`
    ranks (one interpreter start and one process group for all of them); one report per rank, per key."""
    batch = [{"key": key, "scenario": name, "env": env} for key, (name, env) in scenarios.items()]
    path = out_dir / "batch.json"
    path.write_text(json.dumps(batch))
    return _spawn(["--batch", str(path)], ", ".join(scenarios), out_dir, world_size, timeout, list(scenarios))


def _spawn(argv: list[str], what: str, out_dir: Path, world_size: int, timeout: float,
           keys: list[str]) -> dict[str, list[dict]]:
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world_size),
           "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "PYTHONFAULTHANDLER": "1"}  # a rank that crashes in native code leaves its Python stack in its log
    procs = []
    for rank in range(world_size):
        log = open(out_dir / f"rank{rank}.log", "w")
        procs.append((subprocess.Popen([sys.executable, "-m", "tests.distributed.workers", *argv, str(out_dir)],
                                       cwd=ROOT, env={**env, "RANK": str(rank)}, stdout=log,
                                       stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout
    try:
        for p, _log in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    logs = {r: (out_dir / f"rank{r}.log").read_text()[-4000:] for r in range(world_size)}
    codes = [p.returncode for p, _ in procs]
    if any(c != 0 for c in codes):
        raise AssertionError(f"{what}: exit codes {codes} (killed after {timeout:.0f} s if negative)\n" +
                             "\n".join(f"--- rank {r} ---\n{text}" for r, text in logs.items()))
    return {key: [json.loads((out_dir / key / f"rank{r}.json").read_text()) for r in range(world_size)]
            for key in keys}
