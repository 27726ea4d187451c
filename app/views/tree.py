"""The module tree beside the graph: nesting, class, parameter counts; click a row to focus it."""
from __future__ import annotations

import pandas as pd
import panel as pn
import param

from tracer.module_tree import fold_runs

from ..state import ExplorerState


def module_table(state: ExplorerState) -> pd.DataFrame:
    """One row per module in definition order (indented name, class, parameters, address), with runs
    of identical numbered siblings folded into one row ("0-31: LlamaDecoderLayer x32") whose
    children are those of the run's first block."""
    trace = state.trace
    rows: list[dict] = []
    memo: dict = {}

    def visit(address: str, depth: int, label: str, count: int) -> None:
        mod = trace.modules[address]
        params = f"{state.params_under(address):,}" + (f" \u00d7{count}" if count > 1 else "")
        rows.append({"module": "\u2003" * depth + label, "params": params, "address": address})
        for run in fold_runs(trace, mod.children, memo):
            first = trace.modules[run[0]]
            if len(run) > 1:
                name = f"{first.name}-{trace.modules[run[-1]].name}: {first.class_name} x{len(run)}"
            else:
                name = f"{first.name}: {first.class_name}"
            visit(run[0], depth + 1, name, len(run))

    if "" in trace.modules:
        visit("", 0, f"(root): {trace.modules[''].class_name}", 1)
    return pd.DataFrame(rows, columns=["module", "params", "address"])


class ModuleTree(pn.viewable.Viewer):
    """A table of the module tree; clicking a row opens its ancestors and expands or collapses it."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self._df = module_table(self.state)
        # No pagination: the table scrolls in its own column (Tabulator renders only the visible rows);
        # names wrap instead of being cut, so a whole address is always readable.
        self._table = pn.widgets.Tabulator(
            self._df, show_index=False, disabled=True, selectable=False, pagination=None,
            sizing_mode="stretch_both", hidden_columns=["address"], layout="fit_columns",
            widths={"module": 178, "params": 92}, text_align={"params": "right"},
            formatters={"module": {"type": "textarea"}, "params": {"type": "textarea"}},
            css_classes=["tlx-tree"], configuration={"columnDefaults": {"headerSort": False}},
            stylesheets=[":host .tabulator-cell { font-size: 12px; } :host .tabulator-col-title { font-size: 12px; }"],
        )
        self._table.on_click(self._on_click)

    def _on_click(self, event) -> None:
        address = self._df.iloc[event.row]["address"]
        if address:
            self.state.focus_module(address)
        else:
            self.state.focused = ""

    def __panel__(self):
        return pn.Column(pn.pane.Markdown("**Modules** (click to expand or collapse)", margin=(0, 5)), self._table,
                         sizing_mode="stretch_both")
