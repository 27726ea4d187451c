"""Exports: the current view as SVG/PNG (ladder state as caption), the trace file, Model
Explorer JSON, and the same graph opened in Model Explorer served on loopback.

Figures and the trace file are written in a worker process (`app.worker`, task "export") reading the
session's trace from a saved copy, so the server's interpreter stays free for other sessions. The Model
Explorer JSON of a trace up to `IN_PROCESS_MAX_OPS` ops is written here on a thread (0.2-0.3 s for the
8B; a worker's start, the save and the reload cost 40 times that, issue 36 item 5). "Open in Model
Explorer" serves one export per trace for every session of the process, started when a page first
shows the Export tab, so the click mostly finds it running.
"""
from __future__ import annotations

import asyncio
import html
import re
import shutil
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import panel as pn
import param

from .. import downloads, tempdirs
from ..ladder import caption
from ..state import ExplorerState
from ..worker import warm
from .docsync import call_on_document, is_served, refusal_html, run_in_background, text_html


def file_stem(model_class: str) -> str:
    """A safe file-name stem from a model class name: its last dotted/slashed part, [A-Za-z0-9_-] only."""
    last = re.split(r"[./\\:]", str(model_class).strip())[-1]
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", last).strip("_-")[:64]
    return stem or "trace"


def zip_trace(trace: Any, path: str | Path) -> Path:
    """Save the trace into a fresh folder beside `path`, zip it into `path`, and remove that folder.

    Only the folder made here is removed; nothing that was already on disk is touched.
    """
    from ..worker_tasks import zip_folder

    path = Path(path)
    staging = Path(tempfile.mkdtemp(prefix=".tlx-zip-", dir=path.parent))
    try:
        return zip_folder(Path(trace.save(str(staging / "trace"))), path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


IN_PROCESS_MAX_OPS = 10_000  # a Model Explorer export of a larger trace is written in a worker (seconds of GIL here)


def export_isolated(state: ExplorerState, path: Path, kind: str) -> Path:
    """Write export `kind` ("svg", "png", "zip", "model-explorer") of the session's current view to
    `path` in a worker process; returns the path (refusals typed)."""
    return Path(_export_in_worker(state, path, kind)["path"])


def export_for_download(state: ExplorerState, path: Path, kind: str) -> Path:
    """What a download button writes: the Model Explorer graph of a trace up to IN_PROCESS_MAX_OPS ops
    here (the file downloaded, no node data), every other export in a worker (`export_isolated`)."""
    if kind == "model-explorer" and len(state.trace.ops) <= IN_PROCESS_MAX_OPS:
        from exporters.model_explorer.backward import export_graphs

        return Path(export_graphs(state.trace, path))
    return export_isolated(state, path, kind)


def model_explorer_isolated(state: ExplorerState, path: Path) -> tuple[Path, list[Path]]:
    """The Model Explorer hand-off written in a worker: the graph at `path` and one node-data file per
    overlay the trace offers (what `exporters.model_explorer.export` and `export_node_data` write)."""
    result = _export_in_worker(state, path, "model-explorer")
    return Path(result["path"]), [Path(p) for p in result["node_data"]]


def model_explorer_files(state: ExplorerState, path: Path) -> tuple[Path, list[Path]]:
    """`model_explorer_isolated`'s files, written here for a trace up to IN_PROCESS_MAX_OPS ops."""
    if len(state.trace.ops) > IN_PROCESS_MAX_OPS:
        return model_explorer_isolated(state, path)
    from exporters import overlays
    from exporters.model_explorer import export_node_data
    from exporters.model_explorer.backward import export_graphs

    written = Path(export_graphs(state.trace, path))
    data = export_node_data(state.trace, written, tuple(overlays.available(state.trace)))
    return written, [Path(p) for p in data.values()]


def _export_in_worker(state: ExplorerState, path: Path, kind: str) -> dict:
    from ..worker import run_task, saved_copy

    request = {"kind": kind, "path": str(path), "trace": str(saved_copy(state.trace)),
               "expanded": sorted(state.expanded or ()), "fold_repeats": bool(state.fold_repeats)}
    return run_task("export", request, lambda _f, _t: None, site=f"export {path.name}")


_SERVED: dict[tuple[int, int, str], tuple[Any, Future]] = {}  # one Model Explorer per graph and envelope
_SERVED_LOCK = threading.Lock()


def shared_model_explorer(state: ExplorerState) -> Future:
    """A future of the Model Explorer server on this session's trace, shared by every session of it
    (keyed by its graph, envelope and name, as `app.worker.saved_copy`); started on a thread on first
    ask, started again when the last one failed or its process has gone. It runs until the server exits."""
    trace = state.trace
    key = (id(trace.ops), id(trace.envelope), trace.model_class)
    with _SERVED_LOCK:
        hit = _SERVED.get(key)
        if hit is not None and _usable(hit[1]):
            return hit[1]
        future: Future = Future()
        _SERVED[key] = (trace, future)  # the trace is kept so its ids are not reused

    def start() -> None:
        from exporters.model_explorer.server import serve

        try:
            folder = tempdirs.make("tlx-model-explorer-")
            with tempdirs.writing(folder):  # an exit meanwhile waits for the files, then removes them
                graph, node_data = model_explorer_files(state, tempdirs.inside(folder, f"{file_stem(trace.model_class)}.model-explorer.json"))
            future.set_result(serve(graph, node_data=node_data))  # every overlay, as the Python API passes them
        except BaseException as exc:  # shown by the panel that waits on it, as a refusal
            future.set_exception(exc)

    threading.Thread(target=start, name="tlx-model-explorer", daemon=True).start()
    return future


def _usable(future: Future) -> bool:
    if not future.done():
        return True
    if future.exception() is not None:
        return False
    process = getattr(future.result(), "process", None)
    return process is not None and process.poll() is None


def _same_trace(key: tuple, trace: Any) -> bool:
    """Whether `trace` has the graph, envelope (a discharge makes a new one) and name `key` was taken from."""
    return key[0] is trace.ops and key[1] is trace.envelope and key[2] == trace.model_class


def _trace_key(trace: Any) -> tuple:
    """What an export written ahead depends on (the objects held: no id is reused while the key lives)."""
    return (trace.ops, trace.envelope, trace.model_class)


def download_link(label: str, filename: str, href: str) -> str:
    """A download link drawn as the page's buttons are."""
    return (f'<a class="tlx-download" href="{html.escape(href, quote=True)}" download="{html.escape(filename, quote=True)}" '
            'style="display:block;box-sizing:border-box;width:100%;padding:6px 12px;border:1px solid #ccc;'
            'border-radius:4px;background:#fff;color:#000;font:13px sans-serif;text-align:center;'
            f'text-decoration:none">{html.escape(label)}</a>')


class RefusableDownload(pn.widgets.FileDownload):
    """A FileDownload whose callback returns None for a refused export (the refusal is shown in the
    panel's status): nothing is transferred, and Panel logs no "Cannot transfer ... NoneType" error."""

    def _sync_data(self, fileobj: Any) -> None:
        if fileobj is not None:
            super()._sync_data(fileobj)


class ExportPanel(pn.viewable.Viewer):
    """Download buttons for figures, the trace and Model Explorer JSON; a Model Explorer launcher."""

    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self.workdir = tempdirs.make("tlx-export-")
        self._tokens: list[str] = []  # the download links this page was issued (app.downloads)
        self._ahead: dict[str, tuple[tuple, Future]] = {}  # kind -> (trace key, the file written ahead)
        warm()  # a worker child starts its imports now, before the first heavy action of this page
        stem = file_stem(self.state.trace.model_class)
        self.status = pn.pane.HTML("", css_classes=["tlx-export-status"], sizing_mode="stretch_width")
        self.caption = pn.pane.HTML(self._caption_html(), css_classes=["tlx-export-caption"])
        self.svg = self._download("Figure (SVG)", f"{stem}.svg", "svg", "tlx-export-svg")
        self.png = self._download("Figure (PNG)", f"{stem}.png", "png", "tlx-export-png")
        self.trace_file = self._download("Trace file (.zip)", f"{stem}.trace.zip", "zip", "tlx-export-trace")
        self.me_json = self._download("Model Explorer JSON", f"{stem}.model-explorer.json", "model-explorer", "tlx-export-me")
        if self._tokens and len(self.state.trace.ops) <= IN_PROCESS_MAX_OPS:  # served: the JSON is written ahead
            self._write_ahead(f"{stem}.model-explorer.json", "model-explorer")
        self.me_button = pn.widgets.Button(label="Open in Model Explorer", css_classes=["tlx-open-me"])
        self.me_link = pn.pane.HTML("", css_classes=["tlx-me-link"])
        self.me_button.on_click(lambda _e: self.open_model_explorer())
        self.server: Any = None  # the shared Model Explorer this page links to, once it answers
        if is_served(pn.state.curdoc):  # started now: "Open in Model Explorer" mostly finds it running
            shared_model_explorer(self.state)
        self.state.param.watch(lambda _e: setattr(self.caption, "object", self._caption_html()), "ladder")
        if pn.state.curdoc is not None:
            try:
                pn.state.on_session_destroyed(lambda _ctx: self.close())
            except Exception:  # not inside a served session
                pass

    def _caption_html(self) -> str:
        return f'<div style="font:13px sans-serif">Figure caption: <i>{html.escape(caption(self.state.trace))}</i></div>'

    def _download(self, label: str, filename: str, kind: str, css: str) -> Any:
        """A served page's download is a link to the server's download route (`app.downloads`: the file
        streamed over HTTP); elsewhere (a notebook) a FileDownload, whose file travels in a websocket message."""
        doc = self.state.document or pn.state.curdoc
        if is_served(doc):
            token = downloads.issue(downloads.Download(filename, lambda: self._write(filename, kind, doc)))
            self._tokens.append(token)
            return pn.pane.HTML(download_link(label, filename, downloads.url(token)), css_classes=[css],
                                sizing_mode="stretch_width", margin=(5, 10))

        async def callback() -> Any:  # awaited on the loop, which stays free while the worker writes
            try:
                path = tempdirs.inside(self.workdir, filename)
                self.status.object = text_html(f"Writing {filename}...")
                out = await asyncio.to_thread(export_for_download, self.state, path, kind)
            except Exception as exc:
                self.status.object = refusal_html(exc)
                return None
            self.status.object = text_html(f"Wrote {out.name} ({out.stat().st_size:,} bytes).")
            return str(out)

        return RefusableDownload(callback=callback, filename=filename, label=label, embed=False,
                                 css_classes=[css], sizing_mode="stretch_width")

    def _write_ahead(self, filename: str, kind: str) -> None:
        """Write export `kind` now on a thread, so that the first click on its link only streams the file (the
        same file the click would write: it depends on the trace and its envelope only, not on the view)."""
        future: Future = Future()
        self._ahead[kind] = (_trace_key(self.state.trace), future)

        def write() -> None:
            try:
                future.set_result(export_for_download(self.state, tempdirs.inside(self.workdir, filename), kind))
            except BaseException as exc:  # noqa: BLE001 - raised to the click that uses it
                future.set_exception(exc)

        threading.Thread(target=write, name="tlx-export-ahead", daemon=True).start()

    def _write(self, filename: str, kind: str, doc: Any) -> Path:
        """Write export `kind` as `filename` in this session's folder (on the download route's thread), saying
        so in the status line on `doc`'s next tick; a refusal is shown there and raised."""
        def say(text: str) -> None:
            call_on_document(doc, lambda: setattr(self.status, "object", text))

        say(text_html(f"Writing {filename}..."))
        ahead = self._ahead.pop(kind, None)
        try:
            if ahead is not None and _same_trace(ahead[0], self.state.trace):
                out = ahead[1].result()  # written ahead for this very trace and envelope (a refusal raises here too)
            else:
                out = export_for_download(self.state, tempdirs.inside(self.workdir, filename), kind)
        except Exception as exc:
            say(refusal_html(exc))
            raise
        say(text_html(f"Wrote {out.name} ({out.stat().st_size:,} bytes)."))
        return out

    def open_model_explorer(self) -> None:
        """Show the link to Model Explorer serving this graph on 127.0.0.1 (started on first need, shared)."""
        future = shared_model_explorer(self.state)
        if future.done() and future.exception() is None:
            self._served(future.result())
            return
        self.status.object = text_html("Starting Model Explorer on 127.0.0.1 (a few seconds)...")
        self.me_button.disabled = True

        def failed(exc: BaseException) -> None:
            self.me_button.disabled = False
            self.status.object = refusal_html(exc)

        run_in_background(pn.state.curdoc, future.result, self._served, failed)

    def _served(self, server: Any) -> None:
        self.server = server
        self.me_button.disabled = False
        self.status.object = text_html("Model Explorer is serving this graph on loopback.")
        self.me_link.object = self._link(server.url)

    @staticmethod
    def _link(url: str) -> str:
        return (f'<a class="tlx-me-href" href="{html.escape(url, quote=True)}" target="_blank" rel="noopener">'
                "Open the graph in Model Explorer</a>")

    def close(self) -> None:
        """Remove the session's files and withdraw its download links (the shared Model Explorer runs on
        for the other sessions)."""
        self.server = None
        for token in self._tokens:
            downloads.withdraw(token)
        tempdirs.remove(self.workdir)

    def __panel__(self):
        return pn.Column(pn.pane.Markdown("**Export**", margin=(0, 5)), self.caption, self.svg, self.png,
                         self.trace_file, self.me_json, self.me_button, self.me_link, self.status,
                         sizing_mode="stretch_width")
