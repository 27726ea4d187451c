"""The op inspector: label, function, module path, parents and children, shape, dtype,
consumed parameters, source line, the claim state, and statistics of a saved value."""
from __future__ import annotations

import html
import re
from typing import Any

import panel as pn
import param
import torch

from tracer.claims import activation_stats
from tracer.claims.ladder import ladder_headline

from ..state import ExplorerState
from .actions import act_attr
from . import ranks
from .backward import backward_rows


def op_rows(trace: Any, label: str, ladder_state: str) -> list[tuple[str, str]]:
    """(field, text) rows describing op `label` in `trace`: what a reader looks for first (kind, shape, dtype,
    parameters, source, neighbours) at the top, so a short pane shows them without scrolling (issue 36)."""
    op = trace[label]
    rows = [("kind", op.kind), ("function", op.func or "-")]
    if op.out is not None:
        rows += [("shape", str(tuple(op.out.shape))), ("dtype", op.out.dtype), ("device", op.out.device)]
    params = []
    for addr in op.params:
        rec = trace.params.get(addr)
        params.append(f"{addr} {tuple(rec.shape)} {rec.dtype}" if rec else addr)
    rows.append(("consumed parameters", "; ".join(params) or "-"))
    rows.append(("source", str(op.source) if op.source else "-"))
    rows.append(("parents", ", ".join(f"{e.source} (arg {e.position})" for e in op.parents) or "-"))
    kids = trace.children_of(label)
    rows.append(("children", ", ".join(kids[:12]) + (f" ... (+{len(kids) - 12})" if len(kids) > 12 else "") or "-"))
    rows += [("module", op.module or "(root)"),
             ("module path", " > ".join(f"{a}:{c}" if c else a for a, c in op.module_stack if a) or "(root)"),
             ("claim state", _claim_text(ladder_state))]
    return rows


def param_lines(trace: Any, label: str) -> str:
    """The op's consumed parameters as markup, one a line: its address (breakable between its parts), then
    its shape and dtype kept together."""
    op = trace[label]
    lines = []
    for addr in op.params:
        rec = trace.params.get(addr)
        tail = f' <span style="white-space:nowrap">{html.escape(f"{tuple(rec.shape)} {rec.dtype}")}</span>' if rec else ""
        lines.append(f"<div>{breakable(addr)}{tail}</div>")
    return "".join(lines) or "-"


MAX_LINKS = 12


def op_links(labels: list[str], notes: dict[str, str] | None = None) -> str:
    """Op labels as links that select the op ("op:LABEL"), the first MAX_LINKS, then how many more."""
    notes = notes or {}
    links = [f'<span class="tlx-op-link" {act_attr("op", lab)} style="color:#1f4f8a;cursor:pointer;text-decoration:underline">'
             f'{html.escape(lab)}</span>{html.escape(notes.get(lab, ""))}' for lab in labels[:MAX_LINKS]]
    more = f" ... (+{len(labels) - MAX_LINKS})" if len(labels) > MAX_LINKS else ""
    return ", ".join(links) + more if links else "-"


def neighbour_links(trace: Any, label: str) -> dict[str, str]:
    """The parents (with argument positions) and children of op `label` as links."""
    op = trace[label]
    parents = [e.source for e in op.parents]
    notes = {e.source: f" (arg {e.position})" for e in op.parents}
    return {"parents": op_links(list(dict.fromkeys(parents)), notes), "children": op_links(trace.children_of(label))}


def _claim_text(state: str) -> str:
    return ladder_headline(state)


_BREAK = re.compile(r"([/\u00d7_:]|\.(?=\D))")  # where a long value may wrap (issue 36: never mid-word); not in 0.25


def breakable(text: str) -> str:
    """`text` escaped, with a line-break opportunity (<wbr>) after each separator of a path, shape or
    list (not a decimal point), so a long value wraps between its parts rather than inside a word."""
    return _BREAK.sub(r"\1<wbr>", html.escape(text))  # escaping adds none of the separators


def rows_html(title: str, rows: list[tuple[str, str]], markup: dict[str, str] | None = None) -> str:
    """The inspector table; a field named in `markup` shows that (already escaped) markup instead of its text."""
    markup = markup or {}
    body = "".join(
        f'<tr><th style="text-align:left;padding:2px 8px 2px 0;vertical-align:top;white-space:nowrap">{html.escape(k)}</th>'
        f'<td class="tlx-field-{html.escape(k.replace(" ", "-"))}" style="padding:2px 0;overflow-wrap:break-word">'
        f'{markup.get(k, breakable(v))}</td></tr>'
        for k, v in rows)
    return (f'<div class="tlx-inspector" style="font-family:sans-serif;font-size:13px">'
            f'<div style="font-weight:700;font-size:15px;margin-bottom:4px">{html.escape(title)}</div>'
            f"<table>{body}</table></div>")


MAX_HITS = 200  # hits listed under the inspector (the count says how many there are)
HITS_PX, HITS_PX_SELECTED = 132, 48  # the hit list's height; smaller while a hit's details are shown below it


def hits_html(state: ExplorerState, hits: list[tuple[str, str]]) -> str:
    """Every search hit (up to MAX_HITS) as a link with its module path, op kind and shape."""
    if not state.query:
        return ""
    trace, rows = state.trace, []
    for kind, ident in hits[:MAX_HITS]:
        if kind == "op":
            op = trace[ident]
            shape = "\u00d7".join(map(str, op.out.shape)) if op.out is not None else ""
            detail = f"{op.module or '(root)'} \u00b7 {op.kind}" + (f" \u00b7 {shape}" if shape else "")
        else:
            detail = f"module \u00b7 {trace.modules[ident].class_name}"
        chosen = ident in (state.selected, state.focused)
        rows.append(f'<div class="tlx-hit"{" data-selected=1 style=font-weight:700" if chosen else ""}><span class="tlx-op-link" {act_attr(kind, ident)} style="color:#1f4f8a;'
                    f'cursor:pointer;text-decoration:underline">{html.escape(ident)}</span> '
                    f'<span style="color:#555">{html.escape(detail)}</span></div>')
    more = f'<div style="color:#555">... and {len(hits) - MAX_HITS} more: add words or kind:, class:, shape: to narrow</div>' \
        if len(hits) > MAX_HITS else ""
    room = HITS_PX_SELECTED if state.selected or state.focused else HITS_PX  # the selection's details come first
    return (f'<div class="tlx-hits" style="font:12px sans-serif;margin-bottom:8px;border-bottom:1px solid #ddd;'
            f'padding-bottom:4px"><b>{len(hits)} hit{"s" if len(hits) != 1 else ""} for {html.escape(repr(state.query))}</b> '
            f'<span style="color:#555">(narrow with kind:linear, class:LlamaMLP, shape:4096)</span>'
            f'<div class="tlx-hit-list" style="max-height:{room}px;overflow-y:auto">{"".join(rows)}{more}</div></div>')


class Inspector(pn.viewable.Viewer):
    """Details of the selected op, or of the focused module when no op is selected."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self._hits: tuple[str, list] = ("", [])
        self._pane = pn.pane.HTML(self._markup(), sizing_mode="stretch_width")
        self.state.param.watch(lambda *_e: setattr(self._pane, "object", self._markup()),
                               ["selected", "focused", "ladder", "query"])

    def _hit_list(self) -> str:
        """The current search's hits (searched once per query)."""
        if self._hits[0] != self.state.query:
            self._hits = (self.state.query, self.state.search(self.state.query, limit=None) if self.state.query else [])
        return hits_html(self.state, self._hits[1])

    def _markup(self) -> str:
        return self._hit_list() + self._details()  # the hits first, in a box of their own that scrolls

    def _details(self) -> str:
        s = self.state
        trace = s.trace
        if s.selected and s.selected in trace:
            rows = op_rows(trace, s.selected, s.ladder.state)
            value = trace.values.get(s.selected) if trace.values else None
            stats = activation_stats(trace, s.selected) if isinstance(value, torch.Tensor) and value.numel() else {}
            if stats:
                rows += [(f"value {k}".replace("_", "-"), f"{v:.6g}" if isinstance(v, float) else str(v))
                         for k, v in stats.items()]
            elif s.ladder.state == "OBSERVED":
                rows.append(("value", "not saved for this op"))
            rows += backward_rows(trace, s.selected)  # gradient statistics and saved-for-backward (issue 14)
            rows += ranks.inspector_rows(trace, s.selected)  # rank, placement, collective (issue 16)
            return rows_html(f"Op {s.selected}", rows, {**neighbour_links(trace, s.selected),
                                                        "consumed parameters": param_lines(trace, s.selected),
                                                        **ranks.inspector_markup(trace, s.selected)})
        if s.focused and s.focused in trace.modules:
            mod = trace.modules[s.focused]
            rows = [("address", mod.address), ("class", mod.class_name), ("parameters", f"{s.params_under(mod.address):,}"),
                    ("children", ", ".join(c.rsplit('.', 1)[-1] for c in mod.children[:16]) or "-"),
                    ("calls", str(len(mod.calls))), ("claim state", _claim_text(s.ladder.state))]
            return rows_html(f"Module {mod.address}", rows)
        return rows_html("Inspector", [("hint", "click an op in the graph, or search for an op label")])

    def __panel__(self):
        return self._pane
