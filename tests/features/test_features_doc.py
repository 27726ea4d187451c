"""docs/torch-features.md is generated from the committed results; every case and column has a recorded cell."""
from __future__ import annotations

import json
from pathlib import Path

from tests.features.cases import CASES
from tests.features.cells import COLUMNS
from tests.features.report import render, summary

ROOT = Path(__file__).resolve().parents[2]
RESULTS = json.loads((ROOT / "tests" / "features" / "results.json").read_text())


def test_docs_torch_features_is_current_with_the_committed_results():
    assert (ROOT / "docs" / "torch-features.md").read_text() == render(RESULTS), \
        "docs/torch-features.md is stale: python -m tests.features.sweep --render-only (or rerun the sweep)"


def test_every_case_and_column_has_exactly_one_recorded_cell():
    recorded = [(c["case"], c["column"]) for c in RESULTS["cells"]]
    assert sorted(recorded) == sorted((case.name, column) for case in CASES for column in COLUMNS)


def test_report_counts_and_lists_silent_and_untyped_cells():
    cells = [{"case": "eager_mlp", "column": "capture", "result": "pass"},
             {"case": "eager_mlp", "column": "validate", "result": "silent", "code": "missing_computation",
              "reason": "validate passed; parameters read by the plain forward but consumed by no op: fc1.weight"},
             {"case": "hop_cond", "column": "capture", "result": "untyped", "code": "RuntimeError", "reason": "boom"},
             {"case": "hop_cond", "column": "validate", "result": "skipped", "reason": "needs capture"},
             {"case": "jit_script", "column": "capture", "result": "refused", "code": "x_unsupported", "reason": "no"}]
    results = {"conditions": {}, "cells": cells}
    assert summary(results) == {"pass": 1, "silent": 1, "untyped": 1, "skipped": 1, "refused": 1}
    text = render(results)
    assert "**3 cells are neither a pass nor an honest refusal**" not in text  # skipped and refused are honest
    assert "**2 cells are neither a pass nor an honest refusal**" in text
    assert "- `eager_mlp` `validate`: silent `missing_computation`: validate passed; parameters read" in text
    assert "- `hop_cond` `capture`: untyped `RuntimeError`: boom" in text
    assert "| higher-order ops | `hop_cond` |" in text and "**untyped** `RuntimeError`" in text
