"""Rows from the model-zoo sweep: what the sweep found for this model's architecture and layers.

The facts are `zoo_facts.json` beside this module, written from tests/zoo/results.json by
tests/zoo/report.py (a test checks it is current); docs/zoo.md is the full table.
"""
from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from typing import Any

from torch import nn

from .doctor import Row, module_name

FACTS_FILE = "zoo_facts.json"
T_ZOO_HF = "tests/zoo/test_zoo_transformers.py::test_validate_passes"
T_ZOO_NN = "tests/zoo/test_zoo_nn.py::test_validate_passes"
T_ZOO_DOC = "tests/zoo/test_zoo_doc.py::test_docs_zoo_is_current_with_the_committed_results"


@lru_cache(maxsize=1)
def zoo_facts() -> dict[str, Any]:
    """The sweep's facts (empty tables when the file is absent)."""
    try:
        return json.loads(resources.files(__package__).joinpath(FACTS_FILE).read_text())
    except (FileNotFoundError, OSError, ValueError):
        return {"summary": {}, "transformers": {}, "torch_nn": {}, "conditions": {}}


def _conditions() -> str:
    c = zoo_facts().get("conditions", {})
    return f"torch {c.get('torch', '?')}, transformers {c.get('transformers', '?')}, CPU"


def transformers_ledger() -> Row:
    s = zoo_facts().get("summary", {}).get("transformers", {})
    return Row("zoo.transformers", "pass", "info",
               f"the zoo sweep built {s.get('classes', 0)} transformers classes ({s.get('architectures', 0)} "
               f"architectures) from shrunken default configs; the plain forward ran for {s.get('forward_runs', 0)} "
               f"architectures and all five tracer columns (capture bit-equal, validate, reload and validate, "
               f"weights-free capture, discharge) passed for {s.get('all_columns_pass', 0)} ({_conditions()}); "
               f"docs/zoo.md lists every failure", tests=(T_ZOO_HF, T_ZOO_DOC))


def torch_nn_ledger() -> Row:
    s = zoo_facts().get("summary", {}).get("torch_nn", {})
    return Row("zoo.torch_nn", "pass", "info",
               f"the zoo sweep ran {s.get('layers', 0)} torch.nn layer classes in train and eval mode, with and "
               f"without no_grad: capture bit-equal in {s.get('capture', 0)} of {s.get('cells', 0)} cases, "
               f"validation passed in {s.get('validate', 0)} ({_conditions()})", tests=(T_ZOO_NN, T_ZOO_DOC))


def zoo_transformers(model: nn.Module, inputs: Any) -> Row | None:
    """Applies to a transformers model: its class's zoo result, or not tested when the sweep lacks it."""
    if not module_name(model).startswith("transformers."):
        return None
    name = type(model).__name__
    ledger = transformers_ledger()
    fact = zoo_facts().get("transformers", {}).get(name)
    if fact is None:
        return replace(ledger, status="not_tested", severity="warning", detail=f"{name} is not in the zoo sweep",
                       evidence=f"the zoo sweep did not build {name} (no base model or main-head mapping)")
    failures = fact.get("failures", {})
    if not failures:
        return replace(ledger, detail=f"{name}: every column passed",
                       evidence=f"the zoo sweep built {name} from a shrunken default config: plain forward, capture "
                                f"bit-equal, validate, reload and validate, weights-free capture and a CORROBORATED "
                                f"discharge all passed ({_conditions()})")
    listed = "; ".join(f"{col}: {why}" for col, why in sorted(failures.items()))
    if set(failures) == {"forward"}:
        return replace(ledger, status="not_tested", severity="warning", detail=listed,
                       evidence=f"the zoo sweep could not run {name}'s plain forward on its generated inputs, so "
                                f"nothing was traced")
    return replace(ledger, status="known_broken", severity="warning", detail=listed,
                   evidence=f"the zoo sweep built {name} from a shrunken default config; these columns did not pass: "
                            f"{', '.join(sorted(failures))} ({_conditions()})")


def zoo_torch_nn(model: nn.Module, inputs: Any) -> Row | None:
    """Applies when the model holds torch.nn layers the sweep found failing in the model's current mode."""
    table = zoo_facts().get("torch_nn", {})
    mode = "train" if model.training else "eval"
    found = {}
    for m in model.modules():
        failures = table.get(type(m).__name__, {}).get("failures", {}) if module_name(m).startswith("torch.nn") \
            else {}
        hits = {cell: why for cell, why in failures.items() if cell.split(".")[0] in (mode, f"{mode}_no_grad")}
        if hits:
            found[type(m).__name__] = hits
    if not found:
        return None
    listed = "; ".join(f"{layer} ({', '.join(f'{c}: {w}' for c, w in sorted(h.items()))})"
                       for layer, h in sorted(found.items()))
    return replace(torch_nn_ledger(), status="known_broken", severity="warning", detail=listed,
                   evidence=f"the zoo sweep found these layers failing in {mode} mode: {', '.join(sorted(found))}; "
                            f"docs/zoo.md gives each reason")
