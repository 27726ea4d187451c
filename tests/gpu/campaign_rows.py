"""The GPU campaign's results file as rows of docs/deployment.md (between the campaign markers).

No results file: every row says "not run". A row never states more than the file records.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.gpu.campaign import CHECKS, RESULTS, ROOT, SCHEMA

DOCS = ROOT / "docs" / "deployment.md"
START, END = "<!-- gpu-campaign:start -->", "<!-- gpu-campaign:end -->"


def load_results(path: Path = RESULTS) -> dict[str, Any] | None:
    """The results document, or None where no campaign has been run (no file)."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a {SCHEMA} results file")
    return data


def _numbers(row: dict[str, Any]) -> str:
    numbers = row.get("numbers") or {}
    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in numbers.items() if k != "detail")
    detail = row.get("detail")
    return "; ".join(t for t in (detail, text) if t).replace("|", "\\|")


def render(results: dict[str, Any] | None) -> str:
    """The markdown block: a heading line saying when and on what it ran (or that it did not), then one row per check."""
    if results is None:
        head = ("Not run: no GPU was lent to the session that wrote these rows. On a CUDA machine: "
                "`python tests/gpu/campaign.py --out tests/gpu/campaign_results.json`, then "
                "`python tests/gpu/campaign.py --write-docs`.")
    else:
        v = results.get("versions", {})
        head = (f"Run {results.get('date')} on {v.get('gpu') or results.get('device')} in {results.get('seconds')} s: "
                f"torch {v.get('torch')} (CUDA {v.get('cuda')}), transformers {v.get('transformers')}, "
                f"accelerate {v.get('accelerate')}, bitsandbytes {v.get('bitsandbytes')} "
                "(tests/gpu/campaign_results.json).")
    by_name = {r["name"]: r for r in (results or {}).get("checks", [])}
    lines = [START, head, "", "| check | what runs | status | numbers |", "|---|---|---|---|"]
    for check in CHECKS:
        row = by_name.get(check.name)
        status = row["status"] if row is not None else "not run"
        lines.append(f"| `{check.name}` | {check.what} | {status} | {_numbers(row) if row is not None else ''} |")
    lines.append(END)
    return "\n".join(lines)


def current_block(text: str) -> str:
    """The campaign block as docs/deployment.md has it now."""
    start, end = text.index(START), text.index(END) + len(END)
    return text[start:end]


def write_docs(path: Path = RESULTS, docs: Path = DOCS) -> str:
    """Rewrite the block from the results file at `path`; returns the block written."""
    block = render(load_results(path))
    text = docs.read_text()
    docs.write_text(text.replace(current_block(text), block))
    return block
