"""The discharge side panel: describe the real twin, see its memory estimate, capture it in the
background with progress, and turn the banner CORROBORATED or REFUTED (refusals as text)."""
from __future__ import annotations

import threading
from typing import Any

import pandas as pd
import panel as pn
import param

from tracer.errors import TracerError

from .. import twin
from ..ladder import report_rows
from ..sources import shipped_configs
from ..state import ExplorerState
from .docsync import call_on_document, refusal_text, run_in_background


class DischargePanel(pn.viewable.Viewer):
    """Inputs for the real twin, an estimate, a Discharge button, progress and the per-claim report."""

    state = param.ClassSelector(class_=ExplorerState)
    busy = param.Boolean(default=False)

    def __init__(self, **params):
        super().__init__(**params)
        loaded = self.state.loaded
        names = list(shipped_configs())
        default = loaded.config_path.stem if loaded.config_path and loaded.config_path.stem in names else (names[0] if names else "")
        self.config = pn.widgets.Select(label="Config (shipped)", options=names, value=default or None, css_classes=["tlx-twin-config"])
        custom = str(loaded.config_path) if loaded.config_path and loaded.config_path.stem not in names else ""
        self.config_path = pn.widgets.TextInput(label="or a local config path", value=custom, placeholder="/path/to/config.json")
        dtype, attn = twin.structure_defaults(self.state.trace)
        self.dtype = pn.widgets.Select(label="dtype", options=list(twin.DTYPES), value=dtype, css_classes=["tlx-twin-dtype"])
        self.seed = pn.widgets.IntInput(label="seed (random weights)", value=0)
        self.checkpoint = pn.widgets.TextInput(label="or a local checkpoint folder", placeholder="empty: random weights")
        self.shape = pn.widgets.TextInput(label="input shape", value=",".join(map(str, loaded.input_shape)))
        self.ids = pn.widgets.TextInput(label="token ids (optional)", placeholder="1, 2, 3, ...")
        self.text = pn.widgets.TextInput(label="text (optional)", placeholder="needs a tokenizer folder")
        self.tokenizer = pn.widgets.TextInput(label="tokenizer folder", placeholder="local folder with tokenizer.json")
        self.attn = pn.widgets.Select(label="attention", options=list(twin.ATTENTION), value=attn, css_classes=["tlx-twin-attn"])
        self.estimate_button = pn.widgets.Button(label="Estimate memory", css_classes=["tlx-estimate"])
        self.go = pn.widgets.Button(label="Discharge", color="primary", css_classes=["tlx-discharge"])
        self.progress = pn.indicators.Progress(value=0, max=100, visible=False, sizing_mode="stretch_width")
        self.status = pn.pane.Markdown("", css_classes=["tlx-discharge-status"], sizing_mode="stretch_width")
        self.rows = pn.widgets.Tabulator(pd.DataFrame(columns=["claims", "claimed", "observed", "status"]), show_index=False,
                                         disabled=True, visible=False, sizing_mode="stretch_width",
                                         layout="fit_data_stretch", css_classes=["tlx-claims"])
        self.estimate_button.on_click(lambda _e: self.show_estimate())
        self.go.on_click(lambda _e: self.start())
        if self.state.trace.ladder_state == "OBSERVED":
            self.go.disabled = self.estimate_button.disabled = True
            self.status.object = "This trace was captured eagerly on real values: it is already OBSERVED, nothing to discharge."

    def spec(self) -> twin.TwinSpec:
        """The twin as the widgets describe it."""
        config = self.config_path.value.strip() or (self.config.value or "")
        return twin.TwinSpec(config=config, dtype=self.dtype.value, seed=int(self.seed.value or 0),
                             checkpoint=self.checkpoint.value.strip(), input_shape=self.shape.value,
                             ids=self.ids.value, text=self.text.value, tokenizer=self.tokenizer.value.strip(),
                             attn=self.attn.value)

    def show_estimate(self) -> twin.MemoryEstimate | None:
        try:
            est = twin.estimate(self.spec(), self.state.trace)
        except Exception as exc:
            self.status.object = refusal_text(exc)
            return None
        self.status.object = est.describe()
        return est

    def start(self) -> threading.Thread | None:
        """Check the estimate, then capture and discharge on a background thread."""
        if self.busy:
            return None
        try:
            spec = self.spec()
            est = twin.estimate(spec, self.state.trace)
            twin.check_fits(est, spec)
        except Exception as exc:
            self.status.object = refusal_text(exc) + ("" if not isinstance(exc, TracerError) or exc.code != "twin_exceeds_memory"
                                                      else "\n\nThe banner is unchanged: nothing was captured.")
            return None
        self.busy = True
        self.go.disabled = True
        self.progress.visible = True
        self.progress.value = 0
        self.status.object = est.describe() + "\n\nStarting."
        doc = pn.state.curdoc

        def progress(frac: float, text: str) -> None:
            def apply() -> None:
                self.progress.value = int(frac * 100)
                self.status.object = f"{text} ({int(frac * 100)}%)"
            call_on_document(doc, apply)

        def work() -> Any:
            structure = self.state.trace
            twin.check_fits(est, spec)
            real = twin.capture_twin(spec, progress)
            progress(0.85, "discharging the claims")
            return structure.discharge_against(real)

        return run_in_background(doc, work, self._done, self._failed)

    def _done(self, report: Any) -> None:
        self.busy = False
        self.go.disabled = False
        self.progress.value = 100
        self.state.set_report(report)
        lv = self.state.ladder
        self.status.object = f"**{lv.state}**: {lv.detail}"
        first = getattr(report, "contradiction", None) or {}
        row = first.get("claimed_row") if first.get("table") == "ops" else None
        if row and row[0] in self.state.trace:
            self.state.select_op(row[0])  # the inspector shows the contradicted op
        rows = report_rows(report)
        if rows:
            self.rows.value = pd.DataFrame(rows, columns=["claims", "claimed", "observed", "status"])
            self.rows.visible = True

    def _failed(self, exc: BaseException) -> None:
        self.busy = False
        self.go.disabled = False
        self.progress.visible = False
        self.status.object = refusal_text(exc) + "\n\nThe banner is unchanged."

    def __panel__(self):
        return pn.Column(
            pn.pane.Markdown("**Discharge against a real twin**", margin=(0, 5)),
            self.config, self.config_path, self.dtype, self.seed, self.checkpoint, self.shape,
            self.ids, self.text, self.tokenizer, self.attn,
            pn.Row(self.estimate_button, self.go), self.progress, self.status, self.rows,
            sizing_mode="stretch_width",
        )
