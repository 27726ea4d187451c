"""Refusals of the exporters (Model Explorer, layout, figures), next to them; documented in docs/errors.md."""
from __future__ import annotations

from tracer.errors import TracerError


class ExportError(TracerError):
    """An exporter could not write, check or serve its format."""

    code = "export_failed"


# -- export: Model Explorer ---------------------------------------------------------------
class ModelExplorerPayloadError(ExportError):
    code = "model_explorer_payload_invalid"
    default_remedy = "Export the trace again with exporters.model_explorer.export; do not edit the graph JSON by hand."


class ModelExplorerUnavailableError(ExportError):
    code = "model_explorer_not_installed"
    default_remedy = "Install Google's Model Explorer: pip install ai-edge-model-explorer."


class ModelExplorerServerError(ExportError):
    code = "model_explorer_server_failed"
    default_remedy = "Read the server log in the error's findings; pass a free port or leave port=None to pick one."


class ModelExplorerReadbackError(ExportError):
    code = "model_explorer_readback_mismatch"
    default_remedy = "The served file differs from the exported one; export again and do not edit it while serving."


class NonLoopbackHostError(ExportError):
    code = "non_loopback_host_refused"
    default_remedy = (
        "Model Explorer's server reads any file on request; bind 127.0.0.1, or pass "
        "allow_non_loopback=True if you really mean to expose it."
    )


# -- export: layout and figures ---------------------------------------------------------
class LayoutModuleUnknownError(ExportError):
    code = "layout_unknown_module"
    default_remedy = "Expand module addresses that exist in the trace (see trace.modules), e.g. 'model.layers'."


class FigureOptionsError(ExportError):
    code = "figure_options_invalid"
    default_remedy = "Give a positive width in inches (3.4 for one paper column, 7 for the full width) and dpi."


class FigureWriteError(ExportError):
    code = "figure_write_failed"
    default_remedy = "Write the figure to a writable path (its folder is created if missing)."


class OverlayOptionsError(ExportError, ValueError):
    """An overlay name, scale or roll-up that does not exist, or a user overlay that names nothing."""

    code = "overlay_options_invalid"
    default_remedy = ("Pick an overlay from exporters.overlays.available(trace) (activation statistics need saved "
                      "values), a scale 'linear' or 'log', a roll-up 'sum' or 'max', or pass "
                      "{op label or module path: number}.")


class HtmlWriteError(ExportError):
    """The self-contained HTML file could not be written."""

    code = "html_write_failed"
    default_remedy = "Write the HTML file to a writable path (its folder is created if missing)."


class ModelExplorerWriteError(ExportError):
    """A Model Explorer graph or node-data file could not be written (the old file, if any, is left as it was)."""

    code = "model_explorer_write_failed"
    default_remedy = "Free disk space or pick a folder you can write, then export again."
