"""docs/zoo.md from the sweep's results JSON: a summary line, one table per sweep, every failure's reason."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from .defects import CLASSES, classify
from .hf import COLUMNS as HF_COLUMNS
from .nn_layers import COLUMNS as NN_COLUMNS, SKIPPED, VARIANTS

COMMAND = "python -m tests.zoo.sweep --out tests/zoo/results.json"
NN_CELLS = tuple(f"{v}.{c}" for v in VARIANTS for c in NN_COLUMNS)


def hf_name(row: dict[str, Any]) -> tuple[str, str]:
    """(model type, class) of a transformers row (also for a worker-error row)."""
    task = row.get("task") or ["?", "?"]
    return row.get("model_type", task[0]), row.get("class", task[-1])


def row_outcomes(row: dict[str, Any], columns: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Each column's outcome; a worker error fills every column with one `worker_error`."""
    if "error" in row:
        return {c: {"result": "error", "code": "worker_error", "reason": row["error"]} for c in columns}
    return {c: row.get(c, {"result": "skipped", "reason": "not run"}) for c in columns}


def failures(rows: list[dict[str, Any]], columns: tuple[str, ...], name: Any) -> list[tuple[str, str, str, dict]]:
    """(name, column, failure class, outcome) for every failed column."""
    found = []
    for row in rows:
        for column, outcome in row_outcomes(row, columns).items():
            cls = "worker_error" if outcome.get("code") == "worker_error" else classify(column, outcome)
            if cls is not None:
                found.append((name(row), column, cls, outcome))
    return found


def hf_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts for the transformers sweep: per column, per architecture, the 95% target's figure."""
    by_arch: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_arch[hf_name(row)[0]].append(row)
    forward_runs = [a for a, rs in by_arch.items() if any(row_outcomes(r, HF_COLUMNS)["forward"]["result"] == "pass"
                                                          for r in rs)]
    all_pass = [a for a in forward_runs if all(all(o["result"] == "pass" for o in row_outcomes(r, HF_COLUMNS).values())
                                               for r in by_arch[a] if row_outcomes(r, HF_COLUMNS)["forward"]["result"] == "pass")]
    without_reload = [a for a in forward_runs if all(
        all(o["result"] == "pass" for c, o in row_outcomes(r, HF_COLUMNS).items() if c != "reload_validate")
        for r in by_arch[a] if row_outcomes(r, HF_COLUMNS)["forward"]["result"] == "pass")]
    per_column = {c: sum(row_outcomes(r, HF_COLUMNS)[c]["result"] == "pass" for r in rows) for c in HF_COLUMNS}
    untyped = sum(o["result"] == "untyped" for r in rows for o in row_outcomes(r, HF_COLUMNS).values())
    return {"architectures": len(by_arch), "classes": len(rows), "forward_runs": len(forward_runs),
            "all_columns_pass": len(all_pass), "all_but_reload_pass": len(without_reload), "per_column": per_column,
            "untyped": untyped}


def nn_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts for the torch.nn sweep, per column over every layer and variant."""
    per_cell = {c: sum(row_outcomes(r, NN_CELLS)[c]["result"] == "pass" for r in rows) for c in NN_CELLS}
    cells = len(rows) * len(VARIANTS)
    captured = sum(per_cell[f"{v}.capture"] for v in VARIANTS)
    validated = sum(per_cell[f"{v}.validate"] for v in VARIANTS)
    untyped = sum(o["result"] == "untyped" for r in rows for o in row_outcomes(r, NN_CELLS).values())
    return {"layers": len(rows), "cells": cells, "capture": captured, "validate": validated, "untyped": untyped,
            "all_pass": sum(all(o["result"] == "pass" for o in row_outcomes(r, NN_CELLS).values()) for r in rows)}


def _cell(outcome: dict[str, Any]) -> str:
    result = outcome.get("result")
    if result == "pass":
        return "pass"
    if result == "skipped":
        return "-"
    if result == "unavailable":
        return f"n/a (`{outcome.get('code')}`)"
    return f"`{outcome.get('code')}`" + (" (untyped)" if result == "untyped" else "")


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def render(results: dict[str, Any]) -> str:
    """The whole docs/zoo.md text for `results` (deterministic: a test regenerates and compares)."""
    cond = results.get("conditions", {})
    hf_rows = results.get("transformers", [])
    nn_rows = results.get("torch_nn", [])
    hs, ns = hf_summary(hf_rows), nn_summary(nn_rows)
    lines = [
        "# The model zoo: every architecture and layer through every column",
        "",
        f"**Summary:** transformers: {hs['architectures']} architectures ({hs['classes']} classes: base model and "
        f"main head); the plain forward runs for {hs['forward_runs']}; all five tracer columns pass for "
        f"{hs['all_columns_pass']} of those ({_pct(hs['all_columns_pass'], hs['forward_runs'])}), every column but "
        f"`reload_validate` for {hs['all_but_reload_pass']} ({_pct(hs['all_but_reload_pass'], hs['forward_runs'])}); untyped "
        f"exceptions: {hs['untyped']}. torch.nn: {ns['layers']} layers x {len(VARIANTS)} variants = {ns['cells']}; "
        f"capture bit-equal {ns['capture']}/{ns['cells']}, validate passes {ns['validate']}/{ns['cells']}; "
        f"untyped exceptions: {ns['untyped']}.",
        "",
        f"Generated by `tests/zoo/report.py` from `tests/zoo/results.json` (written by `{COMMAND}`; a test checks "
        f"this file is current). Conditions: torch {cond.get('torch')}, transformers {cond.get('transformers')}, "
        f"Python {cond.get('python')}, {cond.get('host')}, {cond.get('cpus')} CPUs, {cond.get('workers')} worker "
        f"processes with {cond.get('threads_per_worker')} thread each, no GPU, no network (`HF_HUB_OFFLINE=1`); "
        f"wall time {cond.get('wall_seconds')} s (1-minute load average {cond.get('load_average_start', '?')} at the "
        f"start, {cond.get('load_average_end', '?')} at the end: the host is shared)"
        + (f"; CPU time of the sweep and its workers {cond['cpu_seconds']} s." if "cpu_seconds" in cond else "."),
        "",
    ] + _reruns(cond) + [
        "## What each column runs",
        "",
        "transformers (one row per class; configs are the config class's own defaults shrunk by "
        "`tests/zoo/shrink.py`: width 32, 4 heads, 2 layers, vocab 256, images 32 px; random seeded weights):",
        "",
        "- `forward`: the plain forward on CPU in eval mode on the first of the candidate inputs built from the "
        "model's forward signature and config (`tests/zoo/inputs.py`: ids `(1, 8)`, pixels or video at the config's "
        "image size, patch and window grid, audio, mel features sized from the source positions, time-series "
        "context, boxes, decoder ids for encoder-decoders) on which it runs. A failure here is a limit of the "
        "sweep's inputs, not a tracer result.",
        "- `capture`: `tracer.trace` on the same inputs; `trace.output` bit-equal to the plain forward.",
        "- `validate`: `tracer.replay.validate.validation_report` passes (replay bit-exact, every edge carries data).",
        "- `reload_validate`: `trace.save`, `tracer.load`, then `tracer.validate` on the loaded trace.",
        "- `weights_free`: the same class and config built with its weights dropped (parameters on meta, one per "
        "tied parameter; buffers as the constructor made them, which the capture swaps for meta copies whose "
        "values are known), `tracer.trace(..., "
        "CaptureOptions(structure_only=True))` on the same inputs, given with their values (they enter as "
        "meta tensors whose values are known: a read of an input's values is answered and disclosed, a read "
        "that depends on weights refuses).",
        "- `discharge`: the weights-free trace's claims discharged against the real capture: CORROBORATED.",
        "",
        "torch.nn (one row per public layer class; table of constructor arguments and inputs in "
        "`tests/zoo/nn_layers.py`): in `train` and `eval` mode, each with and without `torch.no_grad()`: "
        "`capture` (bit-equal to the plain forward, same seed) and `validate`.",
        "",
        "A cell is `pass`, `-` (not run: an earlier column failed), or the typed error code (or the check that did "
        "not hold: `output_not_bit_equal`, `validation_failed`); `(untyped)` marks an exception that is not a "
        "`tracer.errors` class, named by its class: a defect.",
        "",
    ]
    lines += _classes_section(hf_rows, nn_rows)
    lines += _hf_section(hf_rows, hs)
    lines += _nn_section(nn_rows)
    return "\n".join(lines).rstrip() + "\n"


def _reruns(cond: dict[str, Any]) -> list[str]:
    """One paragraph per partial re-sweep merged into the results (tests.zoo.merge)."""
    lines = []
    for r in cond.get("reruns", []):
        if r.get("selection"):  # a rerun of named model types (`--only`), not of the unavailable ones
            lines += [f"Rerun merged in: the rows of {r.get('architectures')} architectures ({r.get('classes')} classes) "
                      f"come from a later run of `python -m tests.zoo.sweep --only {r['selection']}` ({r.get('why', '')}): "
                      f"started {r.get('started_utc')}, merged {r.get('merged_utc')}, {r.get('workers')} workers, "
                      f"{r.get('limit_s_per_task')} s limit per task, 1-minute load average {r.get('load_average_start')} "
                      f"at the start and {r.get('load_average_end')} at the merge.", ""]
            continue
        cut = "" if r.get("architectures") == r.get("planned_architectures") else \
            "; the rest were not reached before the run was stopped and keep their earlier rows"
        lines += [f"Re-sweep merged in: of the {r.get('planned_architectures')} architectures whose plain forward had "
                  f"not run, the rows of {r.get('architectures')} ({r.get('classes')} classes{cut}) come from a later run of `python -m tests.zoo.sweep "
                  f"--only-unavailable` with the inputs built from each model's signature and config "
                  f"(`tests/zoo/inputs.py`): started {r.get('started_utc')}, merged {r.get('merged_utc')}, "
                  f"{r.get('workers')} workers, {r.get('limit_s_per_task')} s limit per task, 1-minute load average "
                  f"{r.get('load_average_start')} at the start and {r.get('load_average_end')} at the merge; every "
                  f"other row is from the run above.", ""]
    return lines


def _classes_section(hf_rows: list, nn_rows: list) -> list[str]:
    found = failures(hf_rows, HF_COLUMNS, lambda r: "/".join(hf_name(r))) + \
        failures(nn_rows, NN_CELLS, lambda r: r.get("layer") or r.get("task", ["?"])[0])
    if not found:
        return ["## Failure classes", "", "None.", ""]
    count, example, cases = Counter(), {}, defaultdict(set)
    for name, column, cls, outcome in found:
        count[cls] += 1
        cases[cls].add(name.split("/")[0])
        example.setdefault(cls, f"{name} `{column}`: {outcome.get('reason', '')}")
    lines = ["## Failure classes", "", "| class | what it is | cells | architectures / layers | example |",
             "|---|---|---|---|---|"]
    for cls, n in count.most_common():
        lines.append(f"| `{cls}` | {CLASSES.get(cls, cls)} | {n} | {len(cases[cls])} | {_esc(example[cls])} |")
    return lines + [""]


def _hf_section(rows: list, hs: dict) -> list[str]:
    head = ["## transformers", "",
            "Passing per column (of " + str(hs["classes"]) + " classes): " +
            ", ".join(f"`{c}` {n}" for c, n in hs["per_column"].items()) + ".", "",
            "| architecture | class | " + " | ".join(HF_COLUMNS) + " |",
            "|---|---|" + "---|" * len(HF_COLUMNS)]
    body, reasons = [], []
    for row in sorted(rows, key=hf_name):
        arch, cls = hf_name(row)
        outcomes = row_outcomes(row, HF_COLUMNS)
        body.append(f"| {arch} | {cls} | " + " | ".join(_cell(outcomes[c]) for c in HF_COLUMNS) + " |")
        reasons += [f"- {arch} / {cls} `{c}` `{o.get('code')}`: {_esc(o.get('reason', ''))}"
                    for c, o in outcomes.items() if o["result"] not in ("pass", "skipped")]
    return head + body + ["", "### Every transformers failure, one line each", ""] + (reasons or ["None."]) + [""]


def _nn_section(rows: list) -> list[str]:
    head = ["## torch.nn", "", "| layer | " + " | ".join(c.replace(".", " ") for c in NN_CELLS) + " |",
            "|---|" + "---|" * len(NN_CELLS)]
    body, reasons = [], []
    for row in sorted(rows, key=lambda r: r.get("layer") or r.get("task", ["?"])[0]):
        name = row.get("layer") or row.get("task", ["?"])[0]
        outcomes = row_outcomes(row, NN_CELLS)
        body.append(f"| {name} | " + " | ".join(_cell(outcomes[c]) for c in NN_CELLS) + " |")
        reasons += [f"- {name} `{c}` `{o.get('code')}`: {_esc(o.get('reason', ''))}"
                    for c, o in outcomes.items() if o["result"] not in ("pass", "skipped")]
    skipped = [f"- `{name}`: {why}" for name, why in sorted(SKIPPED.items())]
    return head + body + ["", "### Every torch.nn failure, one line each", ""] + (reasons or ["None."]) + \
        ["", "### Classes not swept, and why", ""] + skipped + [""]


def _esc(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def zoo_facts(results: dict[str, Any]) -> dict[str, Any]:
    """The compact facts the doctor reads (tracer/compat/zoo_facts.json): summaries and each failure's class."""
    cond = results.get("conditions", {})
    hf_rows, nn_rows = results.get("transformers", []), results.get("torch_nn", [])
    transformers: dict[str, Any] = {}
    for row in hf_rows:
        arch, cls = hf_name(row)
        transformers[cls] = {"model_type": arch, "failures": {}}
    for name, column, kind, outcome in failures(hf_rows, HF_COLUMNS, lambda r: hf_name(r)[1]):
        transformers[name]["failures"][column] = f"{kind} ({outcome.get('code')})"
    torch_nn: dict[str, Any] = {r.get("layer") or r.get("task", ["?"])[0]: {"failures": {}} for r in nn_rows}
    for name, cell, kind, outcome in failures(nn_rows, NN_CELLS, lambda r: r.get("layer") or r.get("task", ["?"])[0]):
        torch_nn[name]["failures"][cell] = kind
    return {"source": "tests/zoo/results.json (python -m tests.zoo.sweep); docs/zoo.md",
            "conditions": {k: cond.get(k) for k in ("torch", "transformers", "python", "host")},
            "summary": {"transformers": hf_summary(hf_rows), "torch_nn": nn_summary(nn_rows)},
            "transformers": transformers, "torch_nn": torch_nn}


def facts_text(results: dict[str, Any]) -> str:
    """zoo_facts as the canonical text written to tracer/compat/zoo_facts.json."""
    return json.dumps(zoo_facts(results), indent=0, sort_keys=True, separators=(",", ":")) + "\n"


COMPAT_BEGIN = "<!-- zoo:begin (generated by tests/zoo/report.py from tests/zoo/results.json) -->"
COMPAT_END = "<!-- zoo:end -->"
MOE_MARKERS = ("moe", "mixtral", "jamba", "dbrx", "deepseek", "granitemoe", "phimoe", "jetmoe", "switch")


def compat_block(results: dict[str, Any]) -> str:
    """The zoo's "tested on" block of docs/compat-matrix.md: summary figures and the MoE families' rows."""
    hs, ns = hf_summary(results.get("transformers", [])), nn_summary(results.get("torch_nn", []))
    cond = results.get("conditions", {})
    lines = [COMPAT_BEGIN, "", "### Tested on: the zoo sweep", "",
             f"From `tests/zoo/results.json` (torch {cond.get('torch')}, transformers {cond.get('transformers')}, "
             f"CPU): {hs['architectures']} transformers architectures ({hs['classes']} classes); the plain forward ran "
             f"for {hs['forward_runs']}, all five tracer columns passed for {hs['all_columns_pass']} and every column "
             f"but `reload_validate` (offline validation) for {hs['all_but_reload_pass']}; "
             f"{ns['layers']} torch.nn layers in 4 modes: capture bit-equal {ns['capture']}/{ns['cells']}, validate "
             f"{ns['validate']}/{ns['cells']}. Full table: docs/zoo.md. The MoE families the sweep built "
             f"(`moe.router_logits` covers fused experts; these rows are the sweep's own columns):", "",
             "| architecture | class | " + " | ".join(HF_COLUMNS) + " |", "|---|---|" + "---|" * len(HF_COLUMNS)]
    for row in sorted(results.get("transformers", []), key=hf_name):
        arch, cls = hf_name(row)
        if any(m in arch.replace("-", "").replace("_", "") for m in MOE_MARKERS):
            outcomes = row_outcomes(row, HF_COLUMNS)
            lines.append(f"| {arch} | {cls} | " + " | ".join(_cell(outcomes[c]) for c in HF_COLUMNS) + " |")
    return "\n".join(lines + ["", COMPAT_END])


def with_compat_block(doc: str, results: dict[str, Any]) -> str:
    """`doc` (docs/compat-matrix.md) with its zoo block replaced (or appended) from `results`."""
    block = compat_block(results)
    if COMPAT_BEGIN in doc and COMPAT_END in doc:
        head, rest = doc.split(COMPAT_BEGIN, 1)
        return head + block + rest.split(COMPAT_END, 1)[1]
    return doc.rstrip() + "\n\n" + block + "\n"
