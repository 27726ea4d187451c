"""Tests' view of trace.json's op columns (schema 3) as one JSON object per op, and back.

`op_rows(body)` gives each op as a dict (deep copies: editing one row changes no other); `set_op_rows`
writes rows back as columns, each interned column's table rebuilt from the rows' distinct values.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from tracer.ir import Op
from tracer.store.columns import INTERNED

_FIELDS = [f for f in dataclasses.fields(Op) if f.name != "index"]


def op_rows(body: dict) -> list[dict[str, Any]]:
    """The ops of a decoded schema-3 body, one dict per op (with its `index`)."""
    columns = body["ops"]
    rows: list[dict[str, Any]] = [{"index": i} for i in range(len(columns["label"]))]  # not `count`: it may be forged
    for name, column in columns.items():
        if name == "count":
            continue
        values = [column["table"][i] for i in column["index"]] if name in INTERNED else column
        for row, value in zip(rows, values):
            row[name] = value
    return json.loads(json.dumps(rows))


def set_op_rows(body: dict, rows: list[dict[str, Any]]) -> None:
    """Replace the body's op columns by `rows` (a field no row has is left out; `index` is implicit)."""
    columns: dict[str, Any] = {"count": len(rows)}
    for f in _FIELDS:
        if not any(f.name in row for row in rows):
            continue
        default = f.default if f.default is not dataclasses.MISSING else {}
        values = [row.get(f.name, default) for row in rows]
        if f.name in INTERNED:
            texts: dict[str, int] = {}
            index = [texts.setdefault(json.dumps(v, sort_keys=True), len(texts)) for v in values]
            columns[f.name] = {"table": [json.loads(t) for t in texts], "index": index}
        else:
            columns[f.name] = values
    body["ops"] = columns
