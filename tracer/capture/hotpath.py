"""The capture's per-call loops in C, when built (`_walk.c` before the forward, `_hotpath.c` during it,
`_assembly.c` after it), else None: the walks', the session's and the build's Python run them.

`pip install -e .` builds the extension where a C compiler is found (it is optional: without one the
install still succeeds and the capture records the same through the Python path, more slowly).
`TORCHLENS_EXPLORE_PURE_PYTHON=1` in the environment turns the extension off (tests run both paths).

- `scan_args(args, kwargs, tmap, param_ids, buffer_ids, save)`: a call's parents (positional, then
  keyword), parameters, scrubbed positional arguments and whether a list argument holds tensors; None
  where the Python path must scan (a buffer, which is watched for writes; a tensor no op produced).
- `record_outputs(outs, record, records, metas, tmap, param_ids, save, value_tables)`: one raw record
  and tmap entry per output of a call that writes nothing in place, and with `save` its value, version and
  storage key in `value_tables` (the session's `values`, `value_versions`, `shared_storage`, as `_save`).
- `site(internal, codes, sites, prefixes)`: `CaptureSession._site`.
- `tensor_indices(tmap, *objs)`: the op indices of the tensors a module call takes or returns
  (`_indices_of(shallow_tensors(...))`); None where the Python walk must run (a dict or list subclass).
- `scan_constants(args, kwargs, known, plain, is_plain)`: `weights_free.constants.ConstantLedger.scan`.
- `torch_function(session, func, types, args, kwargs)`: `CaptureSession.__torch_function__`'s common
  case start to end (after `configure_call(INFO_CACHE, peek_interpreter_stack, scrub_deep,
  shallow_tensors)`), bound to the session for its forward, with its guard's common case where the guard
  gives one (`CallGuard.common_case`: the weights-free guard's, and its simulated device's reads); every
  other call goes to the session's `_torch_function_py` before anything runs. The session attributes that stay
  the same object for the forward (`HOT_STATE`: its containers, guard, options) come as one tuple, the session's
  `_hot`, set by `CaptureSession.run` for the forward; the four that change (suspended, exits, stack, call
  counter) are read from the session per call.
- `ScopedForward(session, module, address, forward)`: `ModuleScopes._wrap`'s wrapper of a module's
  forward (after `configure_scopes(Module._call_impl's code, its inner closure's, ModuleStack, its
  slot descriptors)`), for a module without a fused fast path.
- `wrap_forwards(session, walk, hook_all, fused, ScriptModule, unset, wrapped)`: `ModuleScopes._scope_all`'s
  loop for every module a ScopedForward scopes; returns the others (hooks, fused paths, TorchScript).
  `unwrap_forwards(wrapped, unset)`: `ModuleScopes._unwrap`'s loop.

Before the forward (`_walk.c`): `named_modules(model, remove_duplicate)`, `first_visits(walked)` and
`named_state(walked, table, remove_duplicate)`, as `walk.py`'s (None where a table is no plain dict).

After the forward (`_assembly.c`):
- `op_labels(records)`: `build._labels`.
- `call_templates(records, snapshots, detach)`: `call_template.call_templates` (after
  `configure_templates(CallTemplate, its slot descriptors)`).
- `build_ops(records, labels, templates, metas, sites, make_meta, make_site, unique)`: the loop of
  `build._build_ops` (after `configure_build(Op, its slot descriptors, Edge, its, root entry)`).
- `module_scopes(named, module_calls, labels, tied, addr_of)`: the loop of `build._modules` (after
  `configure_modules(ModuleCallRecord, its slot descriptors, ModuleScope, its)`).
- `param_records(tied, named, dtype_texts, dtype_text, device_texts, device_text)`: the loop of
  `build._params` (after `configure_params(ParamRecord, its slot descriptors)`); None where the Python
  must walk the model.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable

ENV_PURE_PYTHON = "TORCHLENS_EXPLORE_PURE_PYTHON"


def _load(name: str) -> Any:
    if os.environ.get(ENV_PURE_PYTHON, "").strip() not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None


_ext = _load("_hotpath")
_asm = _load("_assembly")
_walk = _load("_walk")
scan_args: Callable[..., Any] | None = getattr(_ext, "scan_args", None)
record_outputs: Callable[..., Any] | None = getattr(_ext, "record_outputs", None)
site: Callable[..., Any] | None = getattr(_ext, "site", None)
tensor_indices: Callable[..., Any] | None = getattr(_ext, "tensor_indices", None)
scan_constants: Callable[..., Any] | None = getattr(_ext, "scan_constants", None)
torch_function: Callable[..., Any] | None = getattr(_ext, "torch_function", None)
hot_state: tuple[str, ...] = getattr(_ext, "HOT_STATE", ())  # the session attributes `torch_function` reads as one tuple
configure_call: Callable[..., Any] | None = getattr(_ext, "configure_call", None)
ScopedForward: type | None = getattr(_ext, "ScopedForward", None)
configure_scopes: Callable[..., Any] | None = getattr(_ext, "configure_scopes", None)
wrap_forwards: Callable[..., Any] | None = getattr(_ext, "wrap_forwards", None)
unwrap_forwards: Callable[..., Any] | None = getattr(_ext, "unwrap_forwards", None)
op_labels: Callable[..., Any] | None = getattr(_asm, "op_labels", None)
call_templates: Callable[..., Any] | None = getattr(_asm, "call_templates", None)
configure_templates: Callable[..., Any] | None = getattr(_asm, "configure_templates", None)
build_ops: Callable[..., Any] | None = getattr(_asm, "build_ops", None)
configure_build: Callable[..., Any] | None = getattr(_asm, "configure_build", None)
module_scopes: Callable[..., Any] | None = getattr(_asm, "module_scopes", None)
configure_modules: Callable[..., Any] | None = getattr(_asm, "configure_modules", None)
param_records: Callable[..., Any] | None = getattr(_asm, "param_records", None)
configure_params: Callable[..., Any] | None = getattr(_asm, "configure_params", None)
named_modules: Callable[..., Any] | None = getattr(_walk, "named_modules", None)
first_visits: Callable[..., Any] | None = getattr(_walk, "first_visits", None)
named_state: Callable[..., Any] | None = getattr(_walk, "named_state", None)
# All three built (an install builds them all or, without a compiler, none)
ACTIVE = _ext is not None and _asm is not None and _walk is not None


def configure(tensor_type: type, placeholder: Any, positions: tuple[str, ...], fields: dict[str, int]) -> None:
    """Hand the extension torch.Tensor, the scrub placeholder and the position names; check the record
    fields it fills are where the session keeps them."""
    if _ext is None:
        return
    expected = {"R_INFO": 0, "R_PARENTS": 1, "R_TENSOR": 2, "R_META": 3, "R_CALL": 4, "R_OUT_IDX": 5, "R_N_OUT": 6,
                "R_STACK": 7, "R_PARAMS": 8, "R_WRITES": 9, "R_INPLACE": 10, "R_SITE": 11, "R_IO": 12, "R_CALLSPEC": 13,
                "R_ARGS": 14, "R_KWARGS": 15}
    if {k: fields[k] for k in expected} != expected:
        raise ImportError(f"tracer.capture._hotpath fills record fields {expected}; the session's are {fields}")
    _ext.configure(tensor_type, placeholder, positions)
