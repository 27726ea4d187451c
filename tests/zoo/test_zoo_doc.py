"""docs/zoo.md is generated from the committed sweep results; the report counts what the rows say."""
from __future__ import annotations

import json
from pathlib import Path

from tests.zoo.defects import classify
from tests.zoo.report import COMPAT_BEGIN, facts_text, hf_summary, nn_summary, render, with_compat_block

ROOT = Path(__file__).resolve().parents[2]


def test_docs_zoo_is_current_with_the_committed_results():
    results = json.loads((ROOT / "tests" / "zoo" / "results.json").read_text())
    assert (ROOT / "docs" / "zoo.md").read_text() == render(results), \
        "docs/zoo.md is stale: python -m tests.zoo.sweep (or render the committed results.json)"
    assert (ROOT / "tracer" / "compat" / "zoo_facts.json").read_text() == facts_text(results), \
        "tracer/compat/zoo_facts.json is stale: regenerate it from the committed results.json"
    matrix = (ROOT / "docs" / "compat-matrix.md").read_text()
    assert COMPAT_BEGIN in matrix and matrix == with_compat_block(matrix, results), \
        "docs/compat-matrix.md's zoo block is stale"


def _hf_row(model_type, **columns):
    row = {"model_type": model_type, "class": model_type.title() + "Model"}
    for c in ("forward", "capture", "validate", "reload_validate", "weights_free", "discharge"):
        row[c] = columns.get(c, {"result": "pass"})
    return row


def test_summary_counts_and_failure_classes():
    rows = [_hf_row("a"),
            _hf_row("b", validate={"result": "failed", "code": "validation_failed", "reason": "[edge] lt_1: ..."}),
            _hf_row("c", forward={"result": "unavailable", "code": "ValueError", "reason": "needs pixels"}),
            _hf_row("d", weights_free={"result": "untyped", "code": "RuntimeError", "reason": "boom"}),
            {"task": ["e", "EModel"], "error": "timed out after 120s"}]
    s = hf_summary(rows)
    assert (s["architectures"], s["forward_runs"], s["all_columns_pass"], s["untyped"]) == (5, 3, 1, 1)
    assert classify("validate", rows[1]["validate"]) == "edge_false_alarm"
    assert classify("weights_free", rows[3]["weights_free"]) == "untyped"
    text = render({"conditions": {}, "transformers": rows, "torch_nn": []})
    assert "all five tracer columns pass for 1 of those (33.3%)" in text and "`worker_error`" in text
    assert "- e / EModel `forward` `worker_error`: timed out after 120s" in text
    nn = nn_summary([{"layer": "ReLU", **{f"{v}.{c}": {"result": "pass"} for v in ("train", "train_no_grad", "eval",
                                                                                "eval_no_grad")
                                           for c in ("capture", "validate")}}])
    assert (nn["cells"], nn["capture"], nn["validate"], nn["untyped"]) == (4, 4, 4, 0)
