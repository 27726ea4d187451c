"""A box under a title line that folds its body away; a click on the line opens or folds it again.

The body is folded by its CSS `display`, not by hiding its models: Panel's Card sets `visible` on each
child, and BokehJS then lays the whole page out again (about 125 ms of the browser's main thread on the
8B page, paid by the first selection of every page, which folds the side tools: issue 36's expand)."""
from __future__ import annotations

import html
from typing import Any

import panel as pn
import param

from .actions import PageActions, act_attr

HEADER_STYLE = ("display:block;width:100%;text-align:left;font:600 13px sans-serif;background:#f3f5f8;color:#222;"
                "padding:5px 8px;cursor:pointer;border:1px solid #dde1e6;border-radius:4px;white-space:nowrap;"
                "overflow:hidden;text-overflow:ellipsis")


def header_html(title: str, collapsed: bool, verb: str) -> str:
    """The title line: a button (Tab reaches it, Enter or Space opens or folds), a triangle pointing right
    (folded) or down (open), then the title."""
    mark = "\u25b8" if collapsed else "\u25be"
    state = "1" if collapsed else "0"
    return (f'<button type="button" class="tlx-fold-header" aria-expanded="{"false" if collapsed else "true"}" '
            f'data-collapsed="{state}" title="{html.escape(title, quote=True)}" {act_attr(verb, "toggle")} '
            f'style="{HEADER_STYLE}">{mark} {html.escape(title)}</button>')


class FoldBox(pn.viewable.Viewer):
    """`body` under a title line; `collapsed` folds it (set it, or click the line)."""

    collapsed = param.Boolean(default=False, doc="the body folded away, only the title line shown")

    def __init__(self, body: Any, title: str, *, actions: PageActions, verb: str, css_classes: list[str],
                 **params: Any) -> None:
        super().__init__(**params)
        self._body, self._title, self._verb = body, title, verb
        self._header = pn.pane.HTML("", sizing_mode="stretch_width", margin=0)  # drawn by _show
        self._box = pn.Column(self._header, body, sizing_mode="stretch_width", css_classes=css_classes,
                              margin=(4, 0, 0, 0))
        actions.on(verb, lambda _arg: self.param.update(collapsed=not self.collapsed))
        self.param.watch(lambda _e: self._show(), "collapsed")
        self._show()

    @property
    def box(self) -> pn.Column:
        """The layout holding the title line and the body (style it to give it room in its column)."""
        return self._box

    def _show(self) -> None:
        self._header.object = header_html(self._title, self.collapsed, self._verb)
        self._body.styles = {**self._body.styles, "display": "none" if self.collapsed else ""}

    def __panel__(self) -> pn.Column:
        return self._box
