"""tracer: capture a PyTorch model's forward pass into a plain-data Trace.

Public face: `trace`, `CaptureOptions`, `load`, `summary` (= `summarize_model`: capture a model on a dummy
input and print its module tree; `Trace.summary()` is that text for a trace in hand), `diff` and `compare`
(with `load_diff`), and the IR classes.
"""
from __future__ import annotations

from .errors import TracerError
from .ir import Collective, Edge, ModuleScope, Op, ParamRecord, ShardLayout, SourceSite, TensorMeta, Trace
from .options import CaptureOptions
from .provenance import Provenance
from .compat import doctor
from .differ import TraceDiff, compare, diff, load_diff
from .tracing import trace
from .replay.offline import offline_callables
from .replay.validate import validate
from .model_summary import summarize_model
from .model_summary import summarize_model as summary  # the TorchLens name (tl.summary); Trace.summary() is the module-tree text of a trace
from .frontends import explore
from . import distributed  # tracer.distributed.simulate / gather / validate_rank (docs/distributed.md)

__version__ = "0.1.0"


def load(path: str) -> Trace:
    """Load a trace saved with `Trace.save` (JSON + safetensors), refusing anything invalid."""
    from .store import load_trace

    return load_trace(path)


__all__ = [
    "CaptureOptions", "Collective", "Edge", "ModuleScope", "Op", "ParamRecord", "Provenance", "ShardLayout", "SourceSite", "TensorMeta",
    "Trace", "TraceDiff", "TracerError", "compare", "diff", "doctor", "explore", "load_diff", "load", "offline_callables",
    "summarize_model", "summary", "trace", "validate", "__version__",
]
