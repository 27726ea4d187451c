"""The capture's per-call loops in C, when built (`_hotpath.c`), else None: the session's Python runs them.

`pip install -e .` builds the extension where a C compiler is found (it is optional: without one the
install still succeeds and the capture records the same through the Python path, more slowly).
`TORCHLENS_EXPLORE_PURE_PYTHON=1` in the environment turns the extension off (tests run both paths).

- `scan_args(args, kwargs, tmap, param_ids, buffer_ids, save)`: a call's parents (positional, then
  keyword), parameters, scrubbed positional arguments and whether a list argument holds tensors; None
  where the Python path must scan (a buffer, which is watched for writes; a tensor no op produced).
- `record_outputs(outs, record, records, metas, tmap, param_ids, save, save_value)`: one raw record
  and tmap entry per output of a call that writes nothing in place.
- `site(internal, codes, sites, prefixes)`: `CaptureSession._site`.
- `tensor_indices(tmap, *objs)`: the op indices of the tensors a module call takes or returns
  (`_indices_of(shallow_tensors(...))`); None where the Python walk must run (a dict or list subclass).
- `scan_constants(args, kwargs, known, plain, is_plain)`: `weights_free.constants.ConstantLedger.scan`.
"""
from __future__ import annotations

import os
from typing import Any, Callable

ENV_PURE_PYTHON = "TORCHLENS_EXPLORE_PURE_PYTHON"


def _load() -> Any:
    if os.environ.get(ENV_PURE_PYTHON, "").strip() not in ("", "0"):
        return None
    try:
        from . import _hotpath  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _hotpath


_ext = _load()
scan_args: Callable[..., Any] | None = getattr(_ext, "scan_args", None)
record_outputs: Callable[..., Any] | None = getattr(_ext, "record_outputs", None)
site: Callable[..., Any] | None = getattr(_ext, "site", None)
tensor_indices: Callable[..., Any] | None = getattr(_ext, "tensor_indices", None)
scan_constants: Callable[..., Any] | None = getattr(_ext, "scan_constants", None)
ACTIVE = _ext is not None


def configure(tensor_type: type, placeholder: Any, positions: tuple[str, ...], fields: dict[str, int]) -> None:
    """Hand the extension torch.Tensor, the scrub placeholder and the position names; check the record
    fields it fills are where the session keeps them."""
    if _ext is None:
        return
    expected = {"R_TENSOR": 2, "R_META": 3, "R_OUT_IDX": 5}
    if {k: fields[k] for k in expected} != expected:
        raise ImportError(f"tracer.capture._hotpath fills record fields {expected}; the session's are {fields}")
    _ext.configure(tensor_type, placeholder, positions)
