"""The doctor panel: the compatibility report's rows (status, severity, evidence) for the model."""
from __future__ import annotations

import html

import panel as pn
import param

from tracer.compat.doctor import DoctorReport, doctor

from ..state import ExplorerState
from .docsync import refusal_text

NO_MODEL = "The doctor inspects a live model; this trace was loaded from a file, so there is no model to examine."


STATUS_COLOURS = {"pass": "#1d6b33", "not_tested": "#8a6100", "known_broken": "#b3261e", "scope": "#1f5f99"}


def doctor_rows(report: DoctorReport) -> list[dict[str, str]]:
    """The report's rows as display text: check, status, severity, detail, evidence."""
    return [{"check": row.key, "status": row.status, "severity": row.severity, "detail": row.detail or "",
             "evidence": row.evidence} for row in report.rows]


def rows_html(rows: list[dict[str, str]]) -> str:
    """One card per row, readable in a narrow side panel."""
    cards = []
    for r in rows:
        colour = STATUS_COLOURS.get(r["status"], "#444")
        detail = f'<div>{html.escape(r["detail"])}</div>' if r["detail"] else ""
        cards.append(
            f'<div class="tlx-doctor-row" data-status="{html.escape(r["status"])}" style="border-left:4px solid {colour};'
            f'padding:4px 8px;margin:6px 0;font:13px sans-serif">'
            f'<b>{html.escape(r["check"])}</b> &middot; <span style="color:{colour};font-weight:600">'
            f'{html.escape(r["status"])}</span> &middot; {html.escape(r["severity"])}{detail}'
            f'<div style="color:#555;font-size:12px;overflow-wrap:anywhere">evidence: {html.escape(r["evidence"])}</div></div>')
    return "".join(cards)


class DoctorPanel(pn.viewable.Viewer):
    """Runs the doctor on the explored model on request and lists its rows."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self._note = pn.pane.Markdown("", css_classes=["tlx-doctor-note"], sizing_mode="stretch_width")
        self._table = pn.pane.HTML("", visible=False, sizing_mode="stretch_width", css_classes=["tlx-doctor-rows"])
        self._run = pn.widgets.Button(label="Run the doctor", color="primary", css_classes=["tlx-doctor-run"])
        self._run.on_click(lambda _e: self.run())
        if self.state.loaded.model is None:
            self._note.object = NO_MODEL
            self._run.disabled = True
        else:
            self._note.object = "Checks which deployment paths this model is known to work on."

    def run(self) -> None:
        """Run the doctor now; a refusal becomes a readable line, never a traceback."""
        loaded = self.state.loaded
        try:
            report = doctor(loaded.model, loaded.inputs)
        except Exception as exc:  # a refusal (or a foreign failure) is shown as text
            self._note.object = refusal_text(exc)
            return
        rows = doctor_rows(report)
        self._table.object = rows_html(rows)
        self._table.visible = True
        self._note.object = f"{len(rows)} rows for {self.state.trace.model_class}."

    def __panel__(self):
        return pn.Column(self._note, self._run, self._table, sizing_mode="stretch_width")
