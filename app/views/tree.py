"""The module tree beside the graph: a collapsible list of whole names (class, parameter count), no
pages; click a name to open its ancestors and expand or collapse it in the graph."""
from __future__ import annotations

import html

import pandas as pd
import panel as pn
import param

from tracer.module_tree import fold_runs

from ..state import ExplorerState
from .actions import act_attr

OPEN_DEPTH = 3  # rows shallower than this start unfolded (root, its children, their children)


def module_table(state: ExplorerState) -> pd.DataFrame:
    """One row per module in definition order (indented name, class, parameters, address, depth),
    with runs of identical numbered siblings folded into one row ("0-31: LlamaDecoderLayer x32")
    whose children are those of the run's first block."""
    trace = state.trace
    rows: list[dict] = []
    memo: dict = {}

    def visit(address: str, depth: int, label: str, count: int) -> None:
        mod = trace.modules[address]
        params = f"{state.params_under(address):,}" + (f" \u00d7{count}" if count > 1 else "")
        rows.append({"module": "\u2003" * depth + label, "params": params, "address": address, "depth": depth})
        for run in fold_runs(trace, mod.children, memo):
            first = trace.modules[run[0]]
            if len(run) > 1:
                name = f"{first.name}-{trace.modules[run[-1]].name}: {first.class_name} x{len(run)}"
            else:
                name = f"{first.name}: {first.class_name}"
            visit(run[0], depth + 1, name, len(run))

    if "" in trace.modules:
        visit("", 0, f"(root): {trace.modules[''].class_name}", 1)
    return pd.DataFrame(rows, columns=["module", "params", "address", "depth"])


TREE_CSS = """<style>
.tlx-tree { font: 12px sans-serif; color: #222; }
.tlx-tree details > div, .tlx-tree details > details { margin-left: 12px; }
.tlx-tree summary { list-style: none; cursor: default; padding: 1px 0; display: flex; }
.tlx-tree summary::-webkit-details-marker { display: none; }
.tlx-tree summary::before { content: "\\25b8"; width: 12px; flex: none; color: #667; cursor: pointer; }
.tlx-tree details[open] > summary::before { content: "\\25be"; }
.tlx-tree .tlx-leaf { display: flex; padding: 1px 0; }
.tlx-tree .tlx-leaf::before { content: ""; width: 12px; flex: none; }
.tlx-tree .tlx-tree-name { flex: 1 1 auto; overflow-wrap: anywhere; cursor: pointer; }
.tlx-tree .tlx-tree-name:hover { text-decoration: underline; color: #1f4f8a; }
.tlx-tree .tlx-tree-params { flex: none; margin-left: 6px; color: #555; text-align: right; }
</style>"""


def tree_html(df: pd.DataFrame) -> str:
    """The table as nested <details>: a row with children folds; a name sends "tree:ADDRESS" when clicked."""
    rows = df.to_dict("records")
    out: list[str] = [TREE_CSS, '<div class="tlx-tree">']
    for i, row in enumerate(rows):
        depth = int(row["depth"])
        nxt = int(rows[i + 1]["depth"]) if i + 1 < len(rows) else -1
        name = (f'<span class="tlx-tree-name" {act_attr("tree", row["address"])} title="{html.escape(row["address"] or "(root)")}">'
                f'{html.escape(str(row["module"]).strip())}</span><span class="tlx-tree-params">{html.escape(row["params"])}</span>')
        if nxt > depth:
            out.append(f'<details{" open" if depth < OPEN_DEPTH else ""}><summary class="tlx-tree-row">{name}</summary>')
        else:
            out.append(f'<div class="tlx-leaf tlx-tree-row">{name}</div>')
            out.append("</details>" * max(depth - max(nxt, 0), 0))
    out.append("</div>")
    return "".join(out)


class ModuleTree(pn.viewable.Viewer):
    """The module tree; a click on a name opens its ancestors and expands or collapses it (`open`)."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self._df = module_table(self.state)
        self._pane = pn.pane.HTML(tree_html(self._df), sizing_mode="stretch_width", css_classes=["tlx-tree-pane"],
                                  styles={"overflow-y": "auto", "flex": "1 1 0", "min-height": "0"})

    def open(self, address: str) -> None:
        """A click on a row: the root clears the focus; a module opens (or closes) in the graph."""
        if address and address in self.state.trace.modules:
            self.state.focus_module(address)
        elif not address:
            self.state.focused = ""

    def __panel__(self):
        return pn.Column(pn.pane.HTML('<div style="font:600 13px sans-serif">Modules <span style="font-weight:400;'
                                      'color:#555">(click a name to open or close it)</span></div>', margin=(0, 5)),
                         self._pane, sizing_mode="stretch_both")
