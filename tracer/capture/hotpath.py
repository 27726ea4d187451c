"""The capture's per-call loops in C, when built (`_walk.c` before the forward, `_hotpath.c` during it,
`_assembly.c` after it), else None: the walks', the session's and the build's Python run them.

`pip install -e .` builds the extension where a C compiler is found (it is optional: without one the
install still succeeds and the capture records the same through the Python path, more slowly).

The kernel for a process: `TORCHLENS_EXPLORE_KERNEL=python` (or the older `TORCHLENS_EXPLORE_PURE_PYTHON=1`)
in the environment turns the extension off (for debugging, and tests run both paths); `c`, the default, uses it
where it can. Where it cannot, the capture runs the Python path and this module says why ONCE, with a
`KernelFallbackWarning` (a RuntimeWarning; its `reason` is "missing", "stale" or "layout"), never an ImportError:
- missing: an extension is not built (no compiler at install time, or a fresh checkout);
- stale: an extension was built from other sources than the `.c` / `.h` beside it (each embeds the digest of its
  sources, `source_digest.py`; an installed wheel carries no sources, so there is nothing to compare);
- layout: the record fields the C fills are not where the session keeps them (`configure`, `check_layout`).
  Found when the session configures the extension, after other modules of the package bound entry points:
  those references are set to None too (`_turn_off`), so a capture never mixes the two kernels.

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
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from . import source_digest

ENV_PURE_PYTHON = "TORCHLENS_EXPLORE_PURE_PYTHON"
ENV_KERNEL = "TORCHLENS_EXPLORE_KERNEL"
KERNELS = ("c", "python")
REMEDY = "pip install -e . (with a C compiler) rebuilds the capture's C extensions"
# The raw record fields the C fills, at the positions it was written for (session.R_* must match).
RECORD_FIELDS = {"R_INFO": 0, "R_PARENTS": 1, "R_TENSOR": 2, "R_META": 3, "R_CALL": 4, "R_OUT_IDX": 5, "R_N_OUT": 6,
                 "R_STACK": 7, "R_PARAMS": 8, "R_WRITES": 9, "R_INPLACE": 10, "R_SITE": 11, "R_IO": 12,
                 "R_CALLSPEC": 13, "R_ARGS": 14, "R_KWARGS": 15}


class KernelFallbackWarning(RuntimeWarning):
    """The capture's C kernel is not used: captures run the Python path (the same records, more slowly)."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"the capture's C kernel is not used ({reason}: {detail}); captures run the Python path, "
                         f"which records the same, more slowly. Remedy: {REMEDY}.")


def kernel() -> str:
    """The kernel this process asks for: "python" where the environment turns the extension off, else "c"."""
    if os.environ.get(ENV_PURE_PYTHON, "").strip() not in ("", "0"):
        return "python"
    return "python" if os.environ.get(ENV_KERNEL, "").strip().lower() == "python" else "c"


def check_layout(fields: dict[str, int]) -> str | None:
    """Why the session's record `fields` do not fit the C, or None where they do."""
    got = {k: fields.get(k) for k in RECORD_FIELDS}
    return None if got == RECORD_FIELDS else f"the C fills record fields {RECORD_FIELDS}; the session's are {got}"


def _fall_back(reason: str, detail: str) -> None:
    warnings.warn(KernelFallbackWarning(reason, detail), stacklevel=3)


def _load_all() -> tuple[Any, Any, Any]:
    """The three extensions, or three Nones (an install builds them all or none; never a mix)."""
    if kernel() == "python":
        return None, None, None
    folder, mods, problems = Path(__file__).resolve().parent, [], []
    for name in ("_hotpath", "_assembly", "_walk"):
        try:
            mod = importlib.import_module(f"{__package__}.{name}")
        except ImportError as exc:
            problems.append(("missing", f"{name} is not built: {exc}"))
            continue
        expected = source_digest.digest(folder, name)
        if expected is not None and getattr(mod, "SOURCE_DIGEST", "") != expected:
            sources = " and ".join(source_digest.SOURCES[name])
            problems.append(("stale", f"{name} was built from other sources than the {sources} beside it"))
        mods.append(mod)
    if problems:
        _fall_back(problems[0][0], "; ".join(detail for _r, detail in problems))
        return None, None, None
    return tuple(mods)


_ext, _asm, _walk = _load_all()
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
# The names above that hold a C entry point (what a layout mismatch turns off)
_ENTRY_POINTS = tuple(n for n, v in list(globals().items()) if v is not None and not n.startswith("_")
                      and any(v is getattr(m, n, None) for m in (_ext, _asm, _walk)))
# All three built (an install builds them all or, without a compiler, none)
ACTIVE = _ext is not None and _asm is not None and _walk is not None


def configure(tensor_type: type, placeholder: Any, positions: tuple[str, ...], fields: dict[str, int]) -> None:
    """Hand the extension torch.Tensor, the scrub placeholder and the position names; check the record
    fields it fills are where the session keeps them (where not: the Python path, with one warning)."""
    if _ext is None:
        return
    mismatch = check_layout(fields)
    if mismatch is not None:
        _turn_off()
        _fall_back("layout", mismatch)
        return
    _ext.configure(tensor_type, placeholder, positions)


def _turn_off() -> None:
    """Every C entry point to None: here, and wherever a module of this package bound one before the session
    configured the extension (the walks, the module scopes, the call templates): a capture never mixes kernels."""
    global _ext, _asm, _walk, hot_state, ACTIVE
    c_objects = {id(globals()[name]) for name in _ENTRY_POINTS}
    top = __package__.split(".")[0]
    for module_name, module in list(sys.modules.items()):
        if module is not None and (module_name == top or module_name.startswith(top + ".")):
            space = getattr(module, "__dict__", {})
            for key, value in list(space.items()):
                if id(value) in c_objects:
                    space[key] = None
    _ext = _asm = _walk = None
    hot_state, ACTIVE = (), False
