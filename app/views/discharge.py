"""The discharge side panel: describe the real twin, see its memory estimate, capture it in a worker
process with progress, and turn the banner CORROBORATED or REFUTED (refusals as text)."""
from __future__ import annotations

import html
import threading
from typing import Any

import panel as pn
import param

from tracer.errors import TracerError

from .. import twin
from ..ladder import report_rows
from ..sources import shipped_configs
from ..state import ExplorerState
from .docsync import BackgroundJob, Report, is_served, refusal_html, run_in_background, text_html
from .steps import fill_in_steps


CLAIM_COLUMNS = ("claims", "claimed", "observed", "status")


def claims_table_html(rows: list[dict]) -> str:
    """The per-claim report (`report_rows`) as a plain table (every cell escaped)."""
    head = "".join(f'<th style="text-align:left;padding:2px 8px 2px 0">{c}</th>' for c in CLAIM_COLUMNS)
    body = "".join("<tr>" + "".join(f'<td style="padding:2px 8px 2px 0">{html.escape(str(v))}</td>' for v in (row.get(c, "") for c in CLAIM_COLUMNS)) + "</tr>"
                   for row in rows)
    return f'<table class="tlx-claims-table" style="font:12px sans-serif;border-collapse:collapse"><tr>{head}</tr>{body}</table>'


_COMPARABLE: dict[str, list[str]] = {}  # config fingerprint -> shipped configs with it (read once per process)


def comparable_configs(structure: Any, names: list[str]) -> list[str]:
    """The shipped configs a twin of `structure` can be built from: the same config fingerprint as the
    one it was captured from (all of `names` when the structure recorded none)."""
    from tracer.claims.twin import config_fingerprint

    wanted = _claimed_fingerprint(structure)
    if not wanted:
        return list(names)
    if wanted not in _COMPARABLE:
        same = []
        for name in names:
            try:
                if config_fingerprint(twin.checked_config(name)) == wanted:
                    same.append(name)
            except TracerError:  # an unusable config is not offered
                continue
        _COMPARABLE[wanted] = same
    return list(_COMPARABLE[wanted])


def comparable_known(structure: Any) -> bool:
    """Whether `comparable_configs` for `structure` is already known (no config is read to answer)."""
    wanted = _claimed_fingerprint(structure)
    return not wanted or wanted in _COMPARABLE


def _claimed_fingerprint(structure: Any) -> str | None:
    """The config fingerprint the structure recorded (read from its twin descriptor alone: no totals are computed)."""
    if isinstance(structure, twin.StructureFacts):
        return (structure.claimed_twin or {}).get("config_fingerprint")
    return twin.claimed_twin(structure).get("config_fingerprint")


def estimate_for_panel(spec: twin.TwinSpec, structure: Any, report: Report) -> twin.MemoryEstimate:
    """The twin's memory estimate: here when the twin's config is the one the structure was captured from
    (its parameter count is the structure's: reading the config is all it costs, milliseconds), in a worker
    process otherwise (the config's model is built on the meta device to count its parameters)."""
    from tracer.claims.twin import config_fingerprint

    wanted = _claimed_fingerprint(structure)
    if wanted and config_fingerprint(twin.checked_config(spec.config)) == wanted:
        report(0.5, "estimating from the structure's own counts")
        return twin.estimate(spec, structure)
    report(0.05, "estimating in a worker process (counting the config's parameters on the meta device)")
    return twin.estimate_isolated(spec, structure, report)


class DischargePanel(pn.viewable.Viewer):
    """Inputs for the real twin, an estimate, a Discharge button, progress, Cancel and the per-claim report.

    Estimating and the twin's checks, build and capture run in a worker process (`app.worker`), one
    job at a time; the claims are joined on a background thread and the results applied on this
    session's own document.
    """

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        loaded = self.state.loaded
        observed = self.state.trace.ladder_state == "OBSERVED"
        served = is_served(pn.state.curdoc)
        self._finding = False  # the comparable configs are being found on a thread (the status says so)
        # the first served page of a process reads every shipped config once (0.3-0.7 s): on a thread, not the loop
        later = served and not observed and not comparable_known(self.state.trace)
        names = [] if observed or later else comparable_configs(self.state.trace, list(shipped_configs()))
        self.config = pn.widgets.Select(label="Config (shipped, comparable with this trace)", options=names,
                                        css_classes=["tlx-twin-config"])
        self.config_path = pn.widgets.TextInput(label="or a local config path", placeholder="/path/to/config.json",
                                                css_classes=["tlx-twin-config-path"])
        dtype, attn = twin.structure_defaults(self.state.trace)
        self.dtype = pn.widgets.Select(label="dtype", options=list(twin.DTYPES), value=dtype, width=110,
                                  css_classes=["tlx-twin-dtype"])
        self.seed = pn.widgets.IntInput(label="seed (random weights)", value=0)
        self.checkpoint = pn.widgets.TextInput(label="or a local checkpoint folder", placeholder="empty: random weights")
        self.shape = pn.widgets.TextInput(label="input shape", value=",".join(map(str, loaded.input_shape)), width=120,
                                          css_classes=["tlx-twin-shape"])
        self.ids = pn.widgets.TextInput(label="token ids (optional)", placeholder="1, 2, 3, ...")
        self.text = pn.widgets.TextInput(label="text (optional)", placeholder="needs a tokenizer folder")
        self.tokenizer = pn.widgets.TextInput(label="tokenizer folder", placeholder="local folder with tokenizer.json")
        self.attn = pn.widgets.Select(label="attention", options=list(twin.ATTENTION), value=attn, width=100,
                                 css_classes=["tlx-twin-attn"])
        self.estimate_button = pn.widgets.Button(label="Estimate memory", css_classes=["tlx-estimate"])
        self.go = pn.widgets.Button(label="Discharge", color="primary", css_classes=["tlx-discharge"])
        # Cancel and the progress bar stay in the layout (disabled / at 0 when idle): showing and hiding
        # them would make the browser lay the whole page out again on every start and finish.
        self.cancel_button = pn.widgets.Button(label="Cancel", disabled=True, css_classes=["tlx-discharge-cancel"])
        self.progress = pn.indicators.Progress(value=0, max=100, sizing_mode="stretch_width")
        self.status = pn.pane.HTML("", css_classes=["tlx-discharge-status"], sizing_mode="stretch_width")
        self.rows = pn.pane.HTML("", visible=False, sizing_mode="stretch_width", css_classes=["tlx-claims"])
        self.job = BackgroundJob(pn.state.curdoc, self._progress, name="tlx-discharge")
        self.estimate_button.on_click(lambda _e: self.show_estimate())
        self.go.on_click(lambda _e: self.start())
        self.cancel_button.on_click(lambda _e: self.cancel())
        # the inputs below the config, added to the page a few per tick (`fill_in_steps`)
        self.more = pn.Column(sizing_mode="stretch_width", margin=0)
        if observed:
            self.go.disabled = self.estimate_button.disabled = True
            self.say("This trace was captured eagerly on real values: it is already OBSERVED, nothing to discharge.")
        elif later:
            self.go.disabled = self.estimate_button.disabled = True
            self.say("Finding the shipped configs comparable with this trace...")
            self._finding = True
            structure = self.state.trace
            run_in_background(pn.state.curdoc, lambda: comparable_configs(structure, list(shipped_configs())),
                              self._offer, lambda exc: self.status.param.update(object=refusal_html(exc)),
                              name="tlx-comparable")
        else:
            self._offer(names)

    def _offer(self, names: list[str]) -> None:
        """Offer the comparable shipped configs; the one this page was opened from is the default."""
        loaded = self.state.loaded
        default = loaded.config_path.stem if loaded.config_path and loaded.config_path.stem in names else (names[0] if names else "")
        custom = str(loaded.config_path) if loaded.config_path and loaded.config_path.stem not in names else ""
        self.config.param.update(options=names, value=default or None)
        if custom and not self.config_path.value:
            self.config_path.value = custom
        self.go.disabled = self.estimate_button.disabled = False
        if not names and not custom:
            self.say(f"No shipped config is the one this {self.state.trace.model_class} was captured from. Type that "
                     "config file under 'or a local config path', or open it with: torchlens-explore PATH/config.json")
        elif self._finding:
            self._finding = False
            self.say("")

    @property
    def busy(self) -> bool:
        return self.job.busy

    def say(self, text: str, strong: str = "") -> None:
        """Show `text` (escaped) as the panel's status."""
        self.status.object = text_html(text, strong=strong)

    def spec(self) -> twin.TwinSpec:
        """The twin as the widgets describe it."""
        config = self.config_path.value.strip() or (self.config.value or "")
        return twin.TwinSpec(config=config, dtype=self.dtype.value, seed=int(self.seed.value or 0),
                             checkpoint=self.checkpoint.value.strip(), input_shape=self.shape.value,
                             ids=self.ids.value, text=self.text.value, tokenizer=self.tokenizer.value.strip(),
                             attn=self.attn.value)

    def show_estimate(self) -> threading.Thread | None:
        """Estimate the twin's memory in the background and show it."""
        spec, structure = self.spec(), self.state.trace

        def work(report: Report) -> twin.MemoryEstimate:
            return estimate_for_panel(spec, structure, report)

        return self._start("Estimating memory.", work, lambda est: self._finish(est.describe()))

    def start(self) -> threading.Thread | None:
        """Preflight, estimate, capture and discharge in the background; the session applies the result."""
        spec, structure = self.spec(), self.state.trace
        return self._start("Starting.", lambda report: twin.discharge_copy(structure, spec, report), self._done)

    def cancel(self) -> None:
        """Drop the running job (it stops at its next step); the banner is unchanged."""
        if self.job.cancel():
            self._idle()
            self.say("Cancelled. The banner is unchanged.")

    def _start(self, opening: str, work: Any, done: Any) -> threading.Thread | None:
        thread = self.job.start(work, done, self._failed)
        if thread is None:
            return None
        self.go.disabled = self.estimate_button.disabled = True
        self.cancel_button.disabled = False
        self.progress.value = 0
        self.say(opening)
        return thread

    def _progress(self, frac: float, text: str) -> None:
        self.progress.value = int(frac * 100)
        self.say(f"{text} ({int(frac * 100)}%)")

    def _idle(self) -> None:
        self.go.disabled = self.estimate_button.disabled = False
        self.cancel_button.disabled = True

    def _finish(self, text: str) -> None:
        self._idle()
        self.progress.value = 0
        self.say(text)

    def _done(self, result: Any) -> None:
        report, _envelope = result
        self._idle()
        self.progress.value = 100
        try:  # applies the new envelope here, on the session's own thread; it is refused (typed) if the
            self.state.set_report(report)  # session's trace is no longer the one discharged
        except TracerError as exc:
            self._failed(exc)
            return
        lv = self.state.ladder
        self.say(lv.detail, strong=f"{lv.state}:")
        first = getattr(report, "contradiction", None) or {}
        row = first.get("claimed_row") if first.get("table") == "ops" else None
        if row and row[0] in self.state.trace:
            self.state.select_op(row[0])  # the inspector shows the contradicted op
        rows = report_rows(report)
        if rows:
            self.rows.object = claims_table_html(rows)
            self.rows.visible = True

    def _failed(self, exc: BaseException) -> None:
        self._idle()
        self.progress.value = 0
        note = "The banner is unchanged: nothing was captured." if isinstance(exc, TracerError) and exc.code in (
            "twin_exceeds_memory", "twins_not_comparable", "limit_exceeded", "config_invalid") else "The banner is unchanged."
        self.status.object = refusal_html(exc) + text_html(note)

    def __panel__(self):
        if self.state.trace.ladder_state == "OBSERVED":  # nothing to discharge: a short note, no form
            return pn.Column(self.status, sizing_mode="stretch_width", css_classes=["tlx-discharge-observed"])
        if not self.more.objects:  # the inputs most twins leave as they are, folded (issue 36: forms collapse)
            fill_in_steps(self.more, [self.seed, self.checkpoint, self.ids, self.text, self.tokenizer])
        return pn.Column(
            pn.pane.HTML("<b>Discharge against a real twin</b>", margin=(0, 5), styles={"font": "14px sans-serif"}),
            self.config, self.config_path, pn.Row(self.dtype, self.attn, self.shape, margin=0),
            pn.Row(self.estimate_button, self.go, self.cancel_button), self.progress, self.status, self.rows,
            pn.Card(self.more, title="More twin inputs (seed, checkpoint, token ids, text)", collapsed=True,
                    sizing_mode="stretch_width", css_classes=["tlx-twin-more"], margin=(6, 0)),
            sizing_mode="stretch_width",
        )
