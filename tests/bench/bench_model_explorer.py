"""Model Explorer export: time (median of warm runs) and file size, GPT-2 small and a Llama-3.1-8B-class trace.

Run: `python tests/bench/bench_model_explorer.py`. Target: GPT-2 small (default GPT2Config, 8 ids)
exports in at most 0.1 s. The Llama row is a weights-free (meta) trace of the shipped 8B config
when structure-only capture works here, else a real-weights Llama with 8B's layer count and tiny
widths (the same op count). Prints a markdown table for docs/benchmarks.md.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import tracer  # noqa: E402
from exporters import model_explorer as me  # noqa: E402
from tests.bench._timing import median_seconds, torchlens_or_none  # noqa: E402

TARGET_S = 0.1


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config()).eval(), torch.randint(0, 50257, (1, 8))


def gpt2_small_trace():
    model, ids = gpt2_small()
    return tracer.trace(model, (ids,), capture=tracer.CaptureOptions(save="none")), "GPT-2 small, 8 ids (eager)"


def llama_8b_trace():
    from tracer.bridges.transformers import trace_config

    return trace_config("llama-3.1-8b", input_shape=(1, 8)), "Llama-3.1-8B config, 8 ids (weights-free, meta)"


def torchlens_gpt2_export(tl, folder: Path, repeats: int) -> tuple[float, int]:
    """Public TorchLens: its own Model Explorer export of its own GPT-2 small trace (capture untimed)."""
    model, ids = gpt2_small()
    log = tl.trace(model, [ids])
    written: list[Path] = []
    seconds = median_seconds(lambda: written.append(Path(tl.export.model_explorer(log, folder / "tl.json"))),
                             repeats=repeats)
    return seconds, sum(p.stat().st_size for p in set(written) if p.is_file())


def measure(trace, folder: Path, repeats: int) -> dict:
    path = folder / "graph.json"
    export_s = median_seconds(lambda: me.export(trace, path), repeats=repeats)
    payload_s = median_seconds(lambda: me.to_graph_collection(trace), repeats=repeats)
    node_data_s = median_seconds(lambda: me.export_node_data(trace, path), repeats=repeats)
    files = me.export_node_data(trace, path)
    report = me.validate_payload(json.loads(path.read_text()))
    return {
        "ops": len(trace.ops), "edges": trace.num_edges, "layers": report.layers, "export_s": export_s,
        "payload_s": payload_s, "node_data_s": node_data_s, "bytes": path.stat().st_size,
        "node_data_bytes": sum(p.stat().st_size for p in files.values()), "ladder": trace.ladder_state,
    }


def main() -> None:
    repeats = int(os.environ.get("BENCH_REPEATS", "9"))
    tl = torchlens_or_none()
    rows = []
    tl_cell = "-"
    with tempfile.TemporaryDirectory() as tmp:
        for build in (gpt2_small_trace, llama_8b_trace):
            trace, name = build()
            rows.append((name, measure(trace, Path(tmp), repeats)))
        if tl is not None:
            tl_s, tl_bytes = torchlens_gpt2_export(tl, Path(tmp), repeats)
            tl_cell = f"{tl_s * 1e3:.1f} ms, {tl_bytes / 1e6:.2f} MB"
    print(f"torch {torch.__version__}, python {platform.python_version()}, {os.cpu_count()} cores, "
          f"median of {repeats} warm runs; torchlens {getattr(tl, '__version__', 'not installed')}")
    print()
    print("| trace | ladder | ops | edges | layers | export (JSON file) | payload only | node data (4 files) "
          "| graph file | node-data files | torchlens export |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['ladder']} | {r['ops']} | {r['edges']} | {r['layers']} | {r['export_s'] * 1e3:.1f} ms "
              f"| {r['payload_s'] * 1e3:.1f} ms | {r['node_data_s'] * 1e3:.1f} ms | {r['bytes'] / 1e6:.2f} MB "
              f"| {r['node_data_bytes'] / 1e6:.2f} MB | {tl_cell if r is rows[0][1] else '-'} |")
    gpt2 = rows[0][1]["export_s"]
    verdict = "meets" if gpt2 <= TARGET_S else "MISSES"
    print(f"\nGPT-2 small export {gpt2 * 1e3:.1f} ms: {verdict} the {TARGET_S * 1e3:.0f} ms target.")


if __name__ == "__main__":
    main()
