"""The GPU campaign script on CPU (CI): it imports, answers --help and --dry-run, skips every GPU check cleanly
without CUDA, runs its CPU-capable bodies at tiny sizes, and its results become docs/deployment.md's rows."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.gpu import campaign
from tests.gpu.campaign_rows import DOCS, current_block, load_results, render

SCRIPT = campaign.ROOT / "tests" / "gpu" / "campaign.py"
NAMES = [c.name for c in campaign.CHECKS]


def script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          cwd=campaign.ROOT)


def test_help_and_dry_run_answer_and_write_nothing(tmp_path):
    had_results = campaign.RESULTS.exists()
    helped = script("--help")
    assert helped.returncode == 0 and "--dry-run" in helped.stdout and "--write-docs" in helped.stdout
    dry = script("--dry-run", "--out", str(tmp_path / "r.json"))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert [c["name"] for c in json.loads(dry.stdout)["checks"]] == NAMES
    assert not (tmp_path / "r.json").exists() and campaign.RESULTS.exists() == had_results
    bad = script("--only", "no_such_check")
    assert bad.returncode == 2 and "unknown checks" in bad.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA records")
def test_every_check_is_skipped_cleanly_without_cuda(tmp_path):
    out = tmp_path / "results.json"
    assert campaign.main(["--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["schema"] == campaign.SCHEMA and results["device"] == "cpu"
    assert [(r["name"], r["status"], r["detail"]) for r in results["checks"]] == [
        (name, "skipped", "no CUDA device") for name in NAMES]
    assert results["versions"]["torch"] == torch.__version__ and results["versions"]["gpu"] is None


def test_a_spent_budget_skips_the_checks_not_started():
    results = campaign.run(device="cuda", budget_s=-1)  # no check may start: none touches the (absent) GPU
    assert {r["status"] for r in results["checks"]} == {"skipped"}
    assert all("budget was spent" in r["detail"] for r in results["checks"])


def test_the_cpu_capable_bodies_run_at_tiny_size():
    ctx = campaign.Context("cpu", campaign.LLAMA_TINY, campaign.LLAMA_TINY, seq=8)
    numbers = campaign.check_llama_bf16(ctx)
    assert numbers["output_equal"] and numbers["validate"] == "passed" and numbers["devices"] == ["cpu"]
    overhead = campaign.check_overhead(ctx, repeats=2)
    assert overhead["ratio"] > 0 and overhead["repeats"] == 2
    row = campaign.run_check(campaign.Check("broken", "raises", lambda c: 1 / 0, needs=()), ctx, 0.0, 1e9)
    assert row["status"] == "error" and row["detail"].startswith("ZeroDivisionError")


def test_results_become_rows_and_no_results_say_not_run():
    none = render(None)
    assert none.count("| not run |") == len(NAMES) and "Not run: no GPU was lent" in none
    results = {"schema": campaign.SCHEMA, "date": "2026-01-01 00:00 UTC", "device": "cuda", "seconds": 12.5,
               "versions": {"gpu": "NVIDIA H200", "torch": "2.13.0", "cuda": "12.8"},
               "checks": [{"name": "llama_8b_bf16", "status": "pass", "numbers": {"ops": 1234, "validate": "passed"}},
                          {"name": "sdpa_kernels", "status": "fail", "detail": "a | b", "numbers": {}}]}
    rows = render(results)
    assert "Run 2026-01-01 00:00 UTC on NVIDIA H200" in rows
    assert '| pass | ops=1234, validate="passed" |' in rows and "| fail | a \\| b |" in rows
    assert rows.count("| not run |") == len(NAMES) - 2


def test_docs_rows_are_the_results_file_rendered():
    assert current_block(DOCS.read_text()) == render(load_results())
