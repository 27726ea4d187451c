"""The capture kernel's contract, defined once: what the C kernel and the Python reference share.

- `RECORD_FIELDS`: the raw op record's fields in order (the `R_*` positions the session, the build and
  both C extensions use: the C reads the positions from this tuple at configure, by name).
- `CaptureState`: the slotted per-capture state the kernel reads and writes during the forward. The
  session inherits it; the C reads it through these member descriptors' offsets (never a `__dict__`) and
  holds a reference of its own to every value it uses across a call into Python.
- `GuardFastPath`: what a call guard hands the C hook for its common case (slotted, explicit fields).
- `ENTRY_POINTS`: every entry point of the C kernel, the extension that defines it and the Python it
  mirrors (the reference kernel); `tests/tracer/test_kernel_contract.py` checks both sides against it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

# ---- the raw op record: one list per recorded tensor, filled on the hot path --------------------------------
RECORD_FIELDS: tuple[str, ...] = (
    "info",      # functions.FuncInfo of the call
    "parents",   # ((op index, argument position), ...)
    "tensor",    # the output tensor when values are saved, else None
    "meta",      # (shape, dtype, device, requires_grad), shared
    "call",      # the call's id (call counter)
    "out_idx",   # this output's position among the call's outputs
    "n_out",     # how many tensors the call returned
    "stack",     # ir.ModuleStack at the call
    "params",    # parameter addresses the call consumed
    "writes",    # buffer addresses the call wrote
    "inplace",   # whether the call wrote in place
    "site",      # the user's (code, offset) source site, shared, or None
    "io",        # an input/output path for synthetic io ops, else ""
    "callspec",  # (func, args, kwargs) of the live call when values are saved
    "args",      # without saved values: args with every tensor replaced by call_template.TENSOR
    "kwargs",    # likewise for kwargs (None when empty)
)
(R_INFO, R_PARENTS, R_TENSOR, R_META, R_CALL, R_OUT_IDX, R_N_OUT, R_STACK, R_PARAMS, R_WRITES, R_INPLACE, R_SITE,
 R_IO, R_CALLSPEC, R_ARGS, R_KWARGS) = (RECORD_FIELDS.index(name) for name in (
    "info", "parents", "tensor", "meta", "call", "out_idx", "n_out", "stack", "params", "writes", "inplace", "site",
    "io", "callspec", "args", "kwargs"))
# The fields a call template is made from (call_template.call_templates; the C loop reads these).
TEMPLATE_FIELDS: tuple[int, ...] = (R_INFO, R_CALLSPEC, R_ARGS, R_KWARGS, R_PARENTS, R_PARAMS, R_CALL)


def record(**fields: Any) -> list:
    """A raw record from its fields by name (the ones not given are None), in `RECORD_FIELDS` order."""
    return [fields.get(name) for name in RECORD_FIELDS]


# ---- the capture state: what the kernel reads and writes per call --------------------------------------------
class CaptureState:
    """The per-capture state the kernel uses during the forward, as slots (the C reads their offsets)."""

    __slots__ = (
        # fixed for the forward
        "simulated", "_guard_fast", "guard", "tmap", "param_ids", "buffer_ids", "save_values", "records", "_metas",
        "record_source", "_site_cache", "_site_codes", "_sites", "_prefixes", "_value_tables",
        # changing during it
        "suspended", "exits", "stack", "call_counter", "call_counts", "frames", "module_calls",
    )


STATE_FIELDS: tuple[str, ...] = CaptureState.__slots__


def state_descriptors() -> tuple:
    """CaptureState's member descriptors in `STATE_FIELDS` order (what the C reads offsets from)."""
    return tuple(CaptureState.__dict__[name] for name in STATE_FIELDS)


# ---- a guard's common case -------------------------------------------------------------------------------------
class GuardFastPath:
    """A call guard's common case for the C hook (`CallGuard.common_case`): the constant ledger's scan tables
    (`known`, `plain`, `is_plain`), the kinds it checks in full, the callables that make constants from Python
    data, the simulated device's common case (or None), and `guard`, the guard whose `_constant_call` and
    `_mixed` the hook resets (as attributes) when it passes a call."""

    __slots__ = ("known", "plain", "is_plain", "scrutinized", "from_data", "simulated", "guard")

    def __init__(self, known: Any, plain: Any, is_plain: Any, scrutinized: Any, from_data: Any, simulated: Any,
                 guard: Any) -> None:
        self.known, self.plain, self.is_plain = known, plain, is_plain
        self.scrutinized, self.from_data, self.simulated, self.guard = scrutinized, from_data, simulated, guard


def guard_fast_descriptors() -> tuple:
    """GuardFastPath's member descriptors in slot order."""
    return tuple(GuardFastPath.__dict__[name] for name in GuardFastPath.__slots__)


# ---- the entry points ------------------------------------------------------------------------------------------
class EntryPoint(NamedTuple):
    """One C entry point: the extension defining it and the Python it mirrors ("" for a configure call)."""

    extension: str
    reference: str


_WALK, _HOT, _ASM = "_walk", "_hotpath", "_assembly"
ENTRY_POINTS: dict[str, EntryPoint] = {
    # before the forward (_walk.c)
    "named_modules": EntryPoint(_WALK, "tracer.capture.walk:named_modules"),
    "first_visits": EntryPoint(_WALK, "tracer.capture.walk:first_visits"),
    "named_state": EntryPoint(_WALK, "tracer.capture.walk:named_state"),
    # during it (_hotpath.c)
    "scan_args": EntryPoint(_HOT, "tracer.capture.session:CaptureSession._scan_args"),
    "record_outputs": EntryPoint(_HOT, "tracer.capture.session:CaptureSession._torch_function_py"),
    "site": EntryPoint(_HOT, "tracer.capture.session:CaptureSession._site"),
    "tensor_indices": EntryPoint(_HOT, "tracer.capture.scopes:ModuleScopes._indices_in"),
    "scan_constants": EntryPoint(_HOT, "tracer.weights_free.constants:ConstantLedger.scan"),
    "torch_function": EntryPoint(_HOT, "tracer.capture.session:CaptureSession._torch_function_py"),
    "ScopedForward": EntryPoint(_HOT, "tracer.capture.scopes:ModuleScopes._wrap"),
    "wrap_forwards": EntryPoint(_HOT, "tracer.capture.scopes:ModuleScopes._scope_all"),
    "unwrap_forwards": EntryPoint(_HOT, "tracer.capture.scopes:ModuleScopes._unwrap"),
    "configure": EntryPoint(_HOT, ""),
    "configure_call": EntryPoint(_HOT, ""),
    "configure_state": EntryPoint(_HOT, ""),
    "configure_scopes": EntryPoint(_HOT, ""),
    "frame_objects": EntryPoint(_HOT, ""),  # tests: walk frame objects in site()
    # after it (_assembly.c)
    "op_labels": EntryPoint(_ASM, "tracer.capture.build:_labels"),
    "call_templates": EntryPoint(_ASM, "tracer.capture.call_template:call_templates"),
    "build_ops": EntryPoint(_ASM, "tracer.capture.build:_build_ops"),
    "module_scopes": EntryPoint(_ASM, "tracer.capture.build:_modules"),
    "param_records": EntryPoint(_ASM, "tracer.capture.build:_params"),
    "configure_records": EntryPoint(_ASM, ""),
    "configure_templates": EntryPoint(_ASM, ""),
    "configure_build": EntryPoint(_ASM, ""),
    "configure_modules": EntryPoint(_ASM, ""),
    "configure_params": EntryPoint(_ASM, ""),
}
EXTENSIONS: tuple[str, ...] = (_WALK, _HOT, _ASM)  # before, during and after the forward
# The session's methods the C hook hands a call back to (the Python kernel's entry points it does not do itself),
# and the guard method it calls for outputs it does not check: the only way back from the kernel into Python.
SESSION_CALLBACKS: tuple[str, ...] = ("_torch_function_py", "_other_output", "_failed", "_indices_in")
GUARD_CALLBACKS: tuple[str, ...] = ("after_call",)
# Module-level names an extension exposes that are data, not entry points.
EXTENSION_DATA: frozenset[str] = frozenset({"SOURCE_DIGEST", "HOT_STATE"})
