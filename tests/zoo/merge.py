"""Merge a partial re-sweep's rows into the committed results: its rows replace the same classes' rows.

The merged results record which architectures the re-sweep ran and under which conditions, so
docs/zoo.md says which rows come from which run.
"""
from __future__ import annotations

from typing import Any


def _key(row: dict[str, Any]) -> tuple[str, str]:
    task = row.get("task") or ["?", "?"]
    return row.get("model_type", task[0]), row.get("class", task[-1])


def merge(results: dict[str, Any], rerun_rows: list[dict[str, Any]], conditions: dict[str, Any]) -> dict[str, Any]:
    """`results` with each transformers row of `rerun_rows` replacing the row of its class (or added)."""
    new = {_key(r): r for r in rerun_rows}
    rows = [new.pop(_key(r), r) for r in results.get("transformers", [])] + list(new.values())
    archs = sorted({_key(r)[0] for r in rerun_rows})
    reruns = list(results.get("conditions", {}).get("reruns", [])) + [{**conditions, "architectures": len(archs),
                                                                      "classes": len(rerun_rows)}]
    return {**results, "transformers": rows, "conditions": {**results.get("conditions", {}), "reruns": reruns}}
