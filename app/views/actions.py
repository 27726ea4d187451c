"""Clicks in plain HTML panes reach the server through one small data source: an element with
`data-tlx-act="VERB:ARG"` anywhere on the page (shadow roots included) sends VERB and ARG when clicked.

One document listener, installed once per page, replaces a widget per clickable thing: the module
tree, breadcrumb segments and the inspector's parents and children are plain markup."""
from __future__ import annotations

import html
from typing import Any, Callable

ACT_ATTR = "data-tlx-act"

# Installed once per page (on the figure's first size): Esc bumps `keys`; a click on an element with
# data-tlx-act (found through open shadow roots) writes its verb and argument into `acts`.
INSTALL_JS = """
if (window.__tlx_acts_installed) return;
window.__tlx_acts_installed = true;
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape') return;
  keys.data = {esc: [(keys.data.esc[0] || 0) + 1]};
});
document.addEventListener('click', (e) => {
  for (const el of e.composedPath()) {
    if (!el.getAttribute) continue;
    const act = el.getAttribute('%s');
    if (act === null) continue;
    e.preventDefault();
    acts.data = {act: [act], n: [(acts.data.n[0] || 0) + 1]};
    return;
  }
}, {capture: true});
""" % ACT_ATTR


def act_attr(verb: str, arg: str) -> str:
    """The attribute that makes an element send `verb` with `arg` when clicked (escaped for markup)."""
    return f'{ACT_ATTR}="{html.escape(f"{verb}:{arg}", quote=True)}"'


class PageActions:
    """The page's Esc key and data-tlx-act clicks, dispatched to handlers by verb."""

    def __init__(self, on_escape: Callable[[], Any]) -> None:
        from bokeh.models import ColumnDataSource

        self.keys = ColumnDataSource({"esc": [0]}, name="tlx-keys")
        self.acts = ColumnDataSource({"act": [""], "n": [0]}, name="tlx-acts")
        self.handlers: dict[str, Callable[[str], Any]] = {}
        self.keys.on_change("data", lambda _a, _o, _n: on_escape())
        self.acts.on_change("data", lambda _a, _o, new: self.dispatch(str((new.get("act") or [""])[0])))

    def on(self, verb: str, handler: Callable[[str], Any]) -> None:
        """Call `handler(arg)` when an element with data-tlx-act="verb:arg" is clicked."""
        self.handlers[verb] = handler

    def dispatch(self, act: str) -> None:
        verb, _, arg = act.partition(":")
        handler = self.handlers.get(verb)
        if handler is not None:
            handler(arg)

    def install(self, fig: Any) -> None:
        """Install the page listener when `fig` is first sized in the browser."""
        from bokeh.models import CustomJS

        fig.js_on_change("inner_width", CustomJS(args=dict(keys=self.keys, acts=self.acts), code=INSTALL_JS))
