"""tracer: capture a PyTorch model's forward pass into a plain-data Trace.

Public face: `trace`, `CaptureOptions`, `load`, `summary` (= `summarize_model`: capture a model on a dummy
input and print its module tree; `Trace.summary()` is that text for a trace in hand), `diff` and `compare`
(with `load_diff`), and the IR classes.

The names are imported on first use (PEP 562): `import tracer` or `from tracer.errors import ...` costs
no torch import, so a command can refuse a bad argument, or start a server, before torch is loaded.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import TracerError

__version__ = "0.1.0"

# public name -> (module, attribute); attribute None: the module itself
_LAZY: dict[str, tuple[str, str | None]] = {
    **{name: (".ir", name) for name in ("Collective", "Edge", "ModuleScope", "Op", "ParamRecord", "ShardLayout",
                                        "SourceSite", "TensorMeta", "Trace")},
    "CaptureOptions": (".options", "CaptureOptions"),
    "Provenance": (".provenance", "Provenance"),
    "doctor": (".compat", "doctor"),
    **{name: (".differ", name) for name in ("TraceDiff", "compare", "diff", "load_diff")},
    "trace": (".tracing", "trace"),
    "offline_callables": (".replay.offline", "offline_callables"),
    "validate": (".replay.validate", "validate"),
    "summarize_model": (".model_summary", "summarize_model"),
    "summary": (".model_summary", "summarize_model"),  # the TorchLens name (tl.summary); Trace.summary() is the module-tree text of a trace
    "explore": (".frontends", "explore"),
    "explain": (".plain_report", "explain"),  # the TorchLens name (tl.report.explain): a plain-language report
    "distributed": (".distributed", None),  # tracer.distributed.simulate / gather / validate_rank (docs/distributed.md)
}

if TYPE_CHECKING:  # what the names are, for type checkers and readers
    from . import distributed
    from .compat import doctor
    from .differ import TraceDiff, compare, diff, load_diff
    from .frontends import explore
    from .plain_report import explain
    from .ir import Collective, Edge, ModuleScope, Op, ParamRecord, ShardLayout, SourceSite, TensorMeta, Trace
    from .model_summary import summarize_model
    from .model_summary import summarize_model as summary
    from .options import CaptureOptions
    from .provenance import Provenance
    from .replay.offline import offline_callables
    from .replay.validate import validate
    from .tracing import trace


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here."""
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(module_name, __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def load(path: str) -> Trace:
    """Load a trace saved with `Trace.save` (JSON + safetensors), refusing anything invalid."""
    from .store import load_trace

    return load_trace(path)


__all__ = [
    "CaptureOptions", "Collective", "Edge", "ModuleScope", "Op", "ParamRecord", "Provenance", "ShardLayout", "SourceSite", "TensorMeta",
    "Trace", "TraceDiff", "TracerError", "compare", "diff", "doctor", "explain", "explore", "load_diff", "load", "offline_callables",
    "summarize_model", "summary", "trace", "validate", "__version__",
]
