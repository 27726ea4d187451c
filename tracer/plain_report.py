"""A trace as a short plain-language report, optionally within a token budget (TorchLens's `tl.report.explain`).

Sections, most useful first: capture status (model, ladder state and what it means, substrate, whether
values were saved, any disclosed gap), size, the folded module tree, op kinds, and the ladder's
evidence (claim tables, discharge). With `max_tokens`, whole sections are dropped from the
end until the report fits, and a closing "Truncation" section names each one dropped; the capture
status is never dropped, so a budget below it returns that section alone and says so. Tokens are
estimated as characters / 4 (no tokenizer is loaded). Built from `tracer.agent_json`'s parts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .agent_json import ladder_json, module_tree_json, summary_json
from .errors import InvalidInputError
from .ir import Trace

CHARS_PER_TOKEN = 4  # the estimate: ceil(characters / 4)
TOP_KINDS = 12  # op kinds listed, most frequent first


@dataclass(frozen=True)
class Explanation:
    """The report text and what the budget did: sections kept and dropped, the estimated tokens."""

    text: str
    kept: tuple[str, ...]
    dropped: tuple[str, ...] = ()
    estimated_tokens: int = 0
    max_tokens: int | None = None
    over_budget: bool = False  # the capture status alone exceeds max_tokens
    sections: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"report": self.text, "kept": list(self.kept), "dropped": list(self.dropped),
                "estimated_tokens": self.estimated_tokens, "max_tokens": self.max_tokens,
                "over_budget": self.over_budget}


def estimate_tokens(text: str) -> int:
    """Tokens of `text` by the characters / 4 estimate (rounded up)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def explain(trace: Trace, max_tokens: int | None = None) -> str:
    """The report's text (see `explanation`)."""
    return explanation(trace, max_tokens).text


def explanation(trace: Trace, max_tokens: int | None = None) -> Explanation:
    """The report of `trace`; with `max_tokens` (an int >= 1), sections dropped from the end until it fits."""
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise InvalidInputError(f"max_tokens {max_tokens!r} is not a positive integer", site="explain(max_tokens)",
                                remedy="Pass max_tokens=None for the whole report, or a budget such as 400.")
    summary, ladder = summary_json(trace), ladder_json(trace)
    sections = {"Capture status": _status(summary, ladder), "Size": _size(summary),
                "Module tree": _tree(module_tree_json(trace, fold=True)), "Op kinds": _kinds(summary),
                "Evidence": _evidence(ladder["evidence"])}
    names = list(sections)
    dropped: list[str] = []
    text = _join(sections, names, dropped)
    while max_tokens is not None and estimate_tokens(text) > max_tokens and len(names) > 1:
        dropped.insert(0, names.pop())
        text = _join(sections, names, dropped, max_tokens)
    tokens = estimate_tokens(text)
    return Explanation(text=text, kept=tuple(names), dropped=tuple(dropped), estimated_tokens=tokens,
                       max_tokens=max_tokens, over_budget=max_tokens is not None and tokens > max_tokens,
                       sections=sections)


def _join(sections: dict[str, str], names: list[str], dropped: list[str], budget: int | None = None) -> str:
    parts = [f"{name}\n{sections[name]}" for name in names]
    if dropped:
        parts.append(f"Truncation\n- dropped to fit {budget} tokens (estimated as characters / {CHARS_PER_TOKEN}): "
                     f"{', '.join(dropped)}; the capture status is never dropped\n- the whole report: max_tokens=None; the same "
                     "facts as JSON: tracer.agent_json.agent_json(trace)")
    return "\n\n".join(parts) + "\n"


def _status(summary: dict[str, Any], ladder: dict[str, Any]) -> str:
    ev = ladder["evidence"]
    lines = [f"- model: {summary['model_class']}",
             f"- ladder state {ladder['headline']}",
             f"- capture: {ev.get('mode', 'eager')}" + (f" on {ev['substrate']}" if ev.get("substrate") else "")
             + ("; no values exist" if summary["structure_only"] else f"; values saved for {summary['values_saved']} ops"),
             "- provenance verified: " + ("yes (no disclosed gap)" if ladder["verified"] else "no, because:")]
    lines += [f"  - {reason}" for reason in ev.get("unverified_reasons", [])]
    return "\n".join(lines)


def _size(summary: dict[str, Any]) -> str:
    tied = summary["parameters_counting_tied"] - summary["parameters"]
    return "\n".join([
        f"- ops: {summary['ops']} ({summary['computed_ops']} computed), edges: {summary['edges']}",
        f"- modules: {summary['modules']}, parameters: {summary['parameters']:,}"
        + (f" (tied counted once; {tied:,} more counting each use)" if tied else "") + f", buffers: {summary['buffers']}",
        f"- inputs: {_io_runs(summary['inputs'])}", f"- outputs: {_io_runs(summary['outputs'])}"])


def _io_runs(ios: list[dict[str, Any]]) -> str:
    """Inputs or outputs, a run of consecutive ones with one shape and dtype written once (a KV cache's 64)."""
    runs: list[list[dict[str, Any]]] = []
    for io in ios:
        if runs and (runs[-1][0]["shape"], runs[-1][0]["dtype"]) == (io["shape"], io["dtype"]):
            runs[-1].append(io)
        else:
            runs.append([io])
    return ", ".join(f"{run[0]['label']}" + (f"..{run[-1]['label']} ({len(run)})" if len(run) > 1 else "")
                     + f" {run[0]['shape']} {run[0]['dtype']}" for run in runs) or "none"


def _kinds(summary: dict[str, Any]) -> str:
    kinds = list(summary["kinds"].items())
    line = ", ".join(f"{kind} {n}" for kind, n in kinds[:TOP_KINDS])
    return f"- {line}" + (f", and {len(kinds) - TOP_KINDS} more kinds" if len(kinds) > TOP_KINDS else "")


def _tree(root: dict[str, Any] | None) -> str:
    if root is None:
        return "- no module tree was recorded"
    lines: list[str] = []
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        repeat = node.get("repeat")
        name = node["address"] or "(root)"
        times = f" x{repeat['count']} ({repeat['addresses'][0]} .. {repeat['addresses'][-1]})" if repeat else ""
        lines.append(f"{'  ' * depth}- {name} {node['class']}{times}: params {node['parameters']:,}, ops {node['ops']}")
        stack.extend((child, depth + 1) for child in reversed(node["children"]))
    return "\n".join(lines)


def _evidence(ev: dict[str, Any]) -> str:
    if ev.get("mode", "eager") == "eager":
        return "- an eager capture: every op ran on real values (OBSERVED); no claim tables"
    lines = [f"- claim table {name}: {c['rows']} rows, digest {c['digest']}" for name, c in ev["claims"].items()]
    lines.append(f"- envelope digest: {ev['digest']}")
    discharge = ev.get("discharge")
    lines.append(f"- discharge: {discharge.get('state')}" if isinstance(discharge, dict) and discharge
                 else "- discharge: none yet (discharge_against a real capture to corroborate or refute)")
    return "\n".join(lines)
