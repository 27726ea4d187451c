"""The doctor panel: the compatibility ledger for the model (applies, status, severity, evidence),
computed on a background thread of the server with progress and a cancel."""
from __future__ import annotations

import html
import threading
from typing import Any

import panel as pn
import param

from tracer.compat.doctor import DoctorReport

from ..state import ExplorerState
from .docsync import BackgroundJob, Report, refusal_html, text_html

NO_MODEL = "The doctor inspects a live model; this trace was loaded from a file, so there is no model to examine."


STATUS_COLOURS = {"pass": "#1d6b33", "not_tested": "#8a6100", "known_broken": "#b3261e", "scope": "#1f5f99"}


def doctor_rows(report: DoctorReport) -> list[dict[str, str]]:
    """The report's rows as display text: check, applies, status, severity, detail, evidence (applicable first)."""
    rows = [{"check": row.key, "applies": "yes" if getattr(row, "applies", True) else "no", "status": row.status,
             "severity": row.severity, "detail": row.detail or "", "evidence": row.evidence} for row in report.rows]
    return sorted(rows, key=lambda r: r["applies"] != "yes")  # stable: the ledger's order within each group


def rows_html(rows: list[dict[str, str]]) -> str:
    """One card per row, readable in a narrow side panel; rows that do not apply are drawn muted."""
    cards = []
    for r in rows:
        colour = STATUS_COLOURS.get(r["status"], "#444")
        applies = r.get("applies", "yes")
        detail = f'<div>{html.escape(r["detail"])}</div>' if r["detail"] else ""
        muted = "" if applies == "yes" else "opacity:0.6;"
        cards.append(
            f'<div class="tlx-doctor-row" data-status="{html.escape(r["status"])}" data-applies="{html.escape(applies)}" '
            f'style="border-left:4px solid {colour};{muted}padding:4px 8px;margin:6px 0;font:13px sans-serif">'
            f'<b>{html.escape(r["check"])}</b> &middot; <span style="color:{colour};font-weight:600">'
            f'{html.escape(r["status"])}</span> &middot; {html.escape(r["severity"])} &middot; '
            f'<span class="tlx-doctor-applies">applies: {html.escape(applies)}</span>{detail}'
            f'<div style="color:#555;font-size:12px;overflow-wrap:anywhere">evidence: {html.escape(r["evidence"])}</div></div>')
    return "".join(cards)


def doctor_here(loaded: Any) -> DoctorReport:
    """The doctor on `loaded`'s own model, in this process: its detectors only read the module tree and
    the installed packages (tens of milliseconds on the 8B meta model), so it needs no worker process,
    whose start and imports cost 20-30 s on a busy machine (issue 36 item 5)."""
    from tracer.compat.doctor import doctor

    return doctor(loaded.model, loaded.inputs)


class DoctorPanel(pn.viewable.Viewer):
    """Runs the doctor on the explored model on request (in the background) and lists its rows."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self._note = pn.pane.HTML("", css_classes=["tlx-doctor-note"], sizing_mode="stretch_width")
        self._table = pn.pane.HTML("", visible=False, sizing_mode="stretch_width", css_classes=["tlx-doctor-rows"])
        self._run = pn.widgets.Button(label="Run the doctor", color="primary", css_classes=["tlx-doctor-run"])
        self._cancel = pn.widgets.Button(label="Cancel", disabled=True, css_classes=["tlx-doctor-cancel"])
        self._progress = pn.indicators.Progress(value=0, max=100, sizing_mode="stretch_width")  # -1 while running
        self.job = BackgroundJob(pn.state.curdoc, lambda _f, text: self._say(text), name="tlx-doctor")
        self._run.on_click(lambda _e: self.run())
        self._cancel.on_click(lambda _e: self.cancel())
        if self.state.loaded.model is None:
            self._say(NO_MODEL)
            self._run.disabled = True
        else:
            self._say("Checks which deployment paths this model is known to work on.")

    def _say(self, text: str) -> None:
        self._note.object = text_html(text)

    def run(self) -> threading.Thread | None:
        """Run the doctor in the background; a refusal becomes a readable line, never a traceback."""
        loaded = self.state.loaded

        def work(report: Report) -> DoctorReport:
            report(0.0, f"Running the doctor on {self.state.trace.model_class}...")
            return doctor_here(loaded)

        thread = self.job.start(work, self._done, self._failed)
        if thread is not None:
            self._run.disabled = True
            self._cancel.disabled = False
            self._progress.value = -1
        return thread

    def cancel(self) -> None:
        if self.job.cancel():
            self._idle()
            self._say("Cancelled.")

    def _idle(self) -> None:
        self._run.disabled = False
        self._cancel.disabled = True
        self._progress.value = 0

    def _done(self, report: DoctorReport) -> None:
        self._idle()
        rows = doctor_rows(report)
        self._table.object = rows_html(rows)
        self._table.visible = True
        applicable = sum(r["applies"] == "yes" for r in rows)
        self._say(f"{len(rows)} rows for {self.state.trace.model_class}, {applicable} of them apply to this model.")

    def _failed(self, exc: BaseException) -> None:
        self._idle()
        self._note.object = refusal_html(exc)

    def __panel__(self):
        return pn.Column(self._note, pn.Row(self._run, self._cancel), self._progress, self._table,
                         sizing_mode="stretch_width")
