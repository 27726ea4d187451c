"""The claim-ladder banner: always visible, coloured by state, REFUTED drawn strongest."""
from __future__ import annotations

import html

import panel as pn
import param

from ..state import ExplorerState
from .actions import act_attr

STYLES = {
    "OBSERVED": ("#e8f1fb", "#1f5f99", "1px"),
    "HYPOTHESIS": ("#fff6dc", "#8a6100", "1px"),
    "CORROBORATED": ("#e5f5e8", "#1d6b33", "1px"),
    "REFUTED": ("#b3261e", "#ffffff", "4px"),
}


MAX_WARNINGS = 3  # shown in the banner; the rest are counted


def banner_html(state: str, headline: str, detail: str, title: str, warnings: tuple[str, ...] = (),
                compact: bool = False) -> str:
    """The banner's markup: state in a data attribute so tests and people read the same thing.

    `compact`: one line (the headline, then the detail cut with an ellipsis, and a warning count); the
    whole text stays in the tooltip and a click on the line ("banner:open") shows it in full again."""
    bg, fg, border = STYLES.get(state, ("#eeeeee", "#222222", "1px"))
    weight = "800" if state == "REFUTED" else "600"
    if compact:
        more = f" · ⚠ {len(warnings)} warning{'s' if len(warnings) != 1 else ''}" if warnings else ""
        tip = html.escape(" ".join([headline, detail, title, *warnings]), quote=True)
        return (
            f'<div class="tlx-banner" data-state="{state}" data-compact="1" title="{tip}" {act_attr("banner", "open")} '
            f'style="background:{bg};color:{fg};border:{border} solid {fg};border-radius:6px;padding:3px 10px;'
            f'font-family:sans-serif;display:flex;align-items:baseline;gap:8px;white-space:nowrap;overflow:hidden;cursor:pointer">'
            f'<span class="tlx-banner-headline" style="font-size:14px;font-weight:{weight};flex:none">{html.escape(headline)}</span>'
            f'<span class="tlx-banner-detail" style="font-size:12px;flex:1 1 auto;min-width:0;overflow:hidden;'
            f'text-overflow:ellipsis">{html.escape(detail)}{html.escape(more)}</span>'
            f'<span style="font-size:12px;flex:none;text-decoration:underline">details</span></div>'
        )
    shown = "".join(f'<div class="tlx-banner-warning" style="font-size:12px;margin-top:2px">&#9888; '
                    f'{html.escape(w)}</div>' for w in warnings[:MAX_WARNINGS])
    if len(warnings) > MAX_WARNINGS:
        shown += f'<div class="tlx-banner-warning" style="font-size:12px">and {len(warnings) - MAX_WARNINGS} more warnings</div>'
    return (
        f'<div class="tlx-banner" data-state="{state}" data-compact="0" style="background:{bg};color:{fg};'
        f'border:{border} solid {fg};border-radius:6px;padding:8px 14px;font-family:sans-serif">'
        f'<div class="tlx-banner-headline" style="font-size:18px;font-weight:{weight}">{html.escape(headline)}</div>'
        f'<div class="tlx-banner-detail" style="font-size:13px;margin-top:2px">{html.escape(detail)}</div>'
        f'<div class="tlx-banner-title" style="font-size:12px;opacity:0.8;margin-top:2px">{html.escape(title)}</div>'
        f"{shown}</div>"
    )


class ClaimBanner(pn.viewable.Viewer):
    """Reads `state.ladder` (the trace's envelope and the last discharge report).

    Drawn in full when the page opens and whenever the ladder state changes; once read (the user's first
    selection, module, expansion or search after that) it shrinks to one line, still coloured by its state."""

    state = param.ClassSelector(class_=ExplorerState)
    compact = param.Boolean(default=False, doc="one line (the state and the start of its detail)")

    def __init__(self, **params):
        super().__init__(**params)
        self._pane = pn.pane.HTML(self._markup(), sizing_mode="stretch_width", css_classes=["tlx-banner-pane"])
        self._shown_state = self.state.ladder.state
        self.state.param.watch(self._ladder_changed, "ladder")
        self.state.param.watch(lambda *_e: self.read(), ["selected", "focused", "expanded", "query"])
        self.param.watch(lambda *_e: self._redraw(), "compact")

    def read(self) -> None:
        """The user has moved on: one line from now (until the state changes)."""
        self.compact = True

    def open(self, _arg: str = "") -> None:
        """Show the banner in full again (a click on its one line)."""
        self.compact = False

    def _ladder_changed(self, _event) -> None:
        state = self.state.ladder.state
        if state != self._shown_state:  # news: drawn in full again
            self._shown_state = state
            if self.compact:
                self.compact = False
                return
        self._redraw()

    def _redraw(self) -> None:
        self._pane.object = self._markup()

    def _markup(self) -> str:
        lv = self.state.ladder
        return banner_html(lv.state, lv.headline, lv.detail, self.state.loaded.title, lv.warnings, compact=self.compact)

    def __panel__(self):
        return self._pane
