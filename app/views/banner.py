"""The claim-ladder banner: always visible, coloured by state, REFUTED drawn strongest."""
from __future__ import annotations

import html

import panel as pn
import param

from ..state import ExplorerState

STYLES = {
    "OBSERVED": ("#e8f1fb", "#1f5f99", "1px"),
    "HYPOTHESIS": ("#fff6dc", "#8a6100", "1px"),
    "CORROBORATED": ("#e5f5e8", "#1d6b33", "1px"),
    "REFUTED": ("#b3261e", "#ffffff", "4px"),
}


MAX_WARNINGS = 3  # shown in the banner; the rest are counted


def banner_html(state: str, headline: str, detail: str, title: str, warnings: tuple[str, ...] = ()) -> str:
    """The banner's markup: state in a data attribute so tests and people read the same thing."""
    bg, fg, border = STYLES.get(state, ("#eeeeee", "#222222", "1px"))
    weight = "800" if state == "REFUTED" else "600"
    shown = "".join(f'<div class="tlx-banner-warning" style="font-size:12px;margin-top:2px">&#9888; '
                    f'{html.escape(w)}</div>' for w in warnings[:MAX_WARNINGS])
    if len(warnings) > MAX_WARNINGS:
        shown += f'<div class="tlx-banner-warning" style="font-size:12px">and {len(warnings) - MAX_WARNINGS} more warnings</div>'
    return (
        f'<div class="tlx-banner" data-state="{state}" style="background:{bg};color:{fg};'
        f'border:{border} solid {fg};border-radius:6px;padding:8px 14px;font-family:sans-serif">'
        f'<div class="tlx-banner-headline" style="font-size:18px;font-weight:{weight}">{html.escape(headline)}</div>'
        f'<div class="tlx-banner-detail" style="font-size:13px;margin-top:2px">{html.escape(detail)}</div>'
        f'<div class="tlx-banner-title" style="font-size:12px;opacity:0.8;margin-top:2px">{html.escape(title)}</div>'
        f"{shown}</div>"
    )


class ClaimBanner(pn.viewable.Viewer):
    """Reads `state.ladder` (the trace's envelope and the last discharge report)."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self._pane = pn.pane.HTML(self._markup(), sizing_mode="stretch_width", css_classes=["tlx-banner-pane"])
        self.state.param.watch(lambda *_e: setattr(self._pane, "object", self._markup()), "ladder")

    def _markup(self) -> str:
        lv = self.state.ladder
        return banner_html(lv.state, lv.headline, lv.detail, self.state.loaded.title, lv.warnings)

    def __panel__(self):
        return self._pane
