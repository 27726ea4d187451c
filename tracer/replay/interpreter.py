"""The replay interpreter behind `validate`: re-run recorded ops from their saved parents.

One method per op category (input, constant, output, call); every error raised while
replaying an op carries "while replaying <label> (<func>) at <source>". The kernel table
below declares what the replay may not expect: non-deterministic kernels and argument
positions whose values an output does not depend on (only their shape or dtype).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch

from ..compat.flash4 import DEPENDENCE as _KNOWN_DEPENDENCE
from ..ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op, Trace
from .autocast import Region
from .offline import NotReplayable, OfflineCalls

# -- the kernel table ------------------------------------------------------------------
# Kernels whose output is random or uninitialised: compared by metadata only.
NONDETERMINISTIC_KINDS = frozenset({
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "normal",
    "normal_", "uniform_", "bernoulli", "bernoulli_", "multinomial", "exponential_", "random_",
    "cauchy_", "log_normal_", "geometric_", "empty", "empty_like", "new_empty", "empty_strided",
    "rrelu", "native_dropout",
    "new",  # Tensor.new(*sizes): uninitialised memory of the caller's dtype and device
    "resize_", "resize_as_",  # grown storage is uninitialised
})
# Kernels random only when their dropout probability is positive (and, where they take one, their
# training flag is set): kind -> ((p position, p keyword, p default), (flag position, flag keyword, flag default)).
_DROPOUT_FLAG = (2, "training", True)
DROPOUT_KINDS: dict[str, tuple[tuple[int, str, float], tuple[int, str, bool] | None]] = {
    **{k: ((1, "p", 0.5), _DROPOUT_FLAG) for k in ("dropout", "dropout1d", "dropout2d", "dropout3d",
                                                   "alpha_dropout", "feature_alpha_dropout")},
    "scaled_dot_product_attention": ((4, "dropout_p", 0.0), None),
    "multi_head_attention_forward": ((10, "dropout_p", 0.0), (13, "training", True)),
}
# Argument positions an output reads for shape/dtype/device only (dependence declared absent).
SHAPE_ONLY_POSITIONS: dict[str, frozenset[str]] = {
    **{k: frozenset({"0"}) for k in ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
                                     "randn_like", "randint_like", "new_zeros", "new_ones", "new_full",
                                     "new_empty", "new_tensor", "new")},
    **{k: frozenset({"0", "1", "the_template"}) for k in ("resize_as_",)},
    **{k: frozenset({"1", "other"}) for k in ("expand_as", "view_as", "reshape_as", "type_as", "to")},
}
# Multi-output kernels where output k reads only item k of argument 0.
# Calls whose output i is made from tensor argument i alone (as varargs, position "i", or in one list, "0.i").
ITEMWISE_KINDS = frozenset({"broadcast_tensors", "atleast_1d", "atleast_2d", "atleast_3d", "meshgrid"})

# Kernels that read an integer argument as indices into another operand: when the indexed
# operand holds a single value everywhere, no index can change the output in this forward.
INDEXING_KINDS = frozenset({"gather", "index_select", "take", "take_along_dim", "embedding", "getitem",
                            "index", "index_put", "scatter", "scatter_add"})


# Kernels that leave memory uninitialised, and in-place writes that may fill such
# memory: the write's target argument carries no data when it came from one of these.
UNINITIALISED_KINDS = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new", "resize_", "resize_as_"})
# In-place kernels that replace every element of their target (argument 0) whatever it held.
FULL_OVERWRITE_KINDS = frozenset({"zero_", "fill_", "copy_", "normal_", "uniform_", "random_"})
OVERWRITE_KINDS = frozenset({"setitem", "copy_", "index_put_", "index_copy_", "scatter_", "fill_", "zero_",
                             "masked_fill_", "masked_scatter_"})
# Kernels whose output is piecewise constant in their inputs (besides every op with an integer or
# boolean output): a small perturbation need not change it, so an unchanged output is no evidence.
PIECEWISE_KINDS = frozenset({
    "floor", "ceil", "round", "trunc", "fix", "sign", "sgn", "heaviside", "floor_divide", "floordiv",
    "bucketize", "searchsorted", "argmax", "argmin", "argsort", "sort", "topk", "kthvalue", "mode", "max",
    "min", "median", "nanmedian", "histc", "eq", "ne", "lt", "le", "gt", "ge", "isclose", "all", "any",
    "logical_and", "logical_or", "logical_not", "logical_xor", "isnan", "isinf", "isfinite", "signbit",
    "floor_", "ceil_", "round_", "trunc_", "sign_", "rfloordiv", "ifloordiv",
})
_FLOAT_PREFIXES = ("float", "bfloat", "complex")


def is_piecewise_constant(op: Op) -> bool:
    """True when `op`'s output cannot be expected to move under a small change of an input."""
    if op.out is not None and not op.out.dtype.startswith(_FLOAT_PREFIXES):
        return True
    return op.kind in PIECEWISE_KINDS


# Foreign kernels (autograd Functions, custom ops): Op.func -> {output index: the argument
# positions that output reads}. Outputs not listed are expected to read every argument.
FOREIGN_DEPENDENCE: dict[str, dict[int, frozenset[str]]] = {}
FOREIGN_DEPENDENCE.update(_KNOWN_DEPENDENCE)  # FlashAttention 4's Functions (tracer/compat/flash4.py)


def declare_dependence(kernel: Any, reads: Mapping[int, Iterable[int | str]]) -> str:
    """Declare which arguments each output of a foreign kernel reads; returns the `Op.func` key.

    `kernel` is a `torch.autograd.Function` class, a torch.library custom op, or its recorded
    name; `reads` maps an output index to argument positions (ints or keyword names). The
    perturbation check then excuses exactly the undeclared edges of the listed outputs.
    """
    from ..capture.boundaries import kernel_name

    key = kernel_name(kernel)
    FOREIGN_DEPENDENCE[key] = {int(k): frozenset(str(p) for p in v) for k, v in reads.items()}
    return key


def forget_dependence(kernel: Any) -> None:
    """Remove a declaration made with `declare_dependence`."""
    from ..capture.boundaries import kernel_name

    FOREIGN_DEPENDENCE.pop(kernel_name(kernel), None)


def is_nondeterministic(op: Op, args: tuple, kwargs: Mapping[str, Any]) -> bool:
    """True when the kernel table says `op`'s output is random for this call."""
    if op.kind in NONDETERMINISTIC_KINDS:
        return True
    spec = DROPOUT_KINDS.get(op.kind)
    if spec is None:
        return False
    (p_pos, p_name, p_default), flag = spec
    p = args[p_pos] if len(args) > p_pos else kwargs.get(p_name, p_default)
    if flag is not None:
        f_pos, f_name, f_default = flag
        if not (args[f_pos] if len(args) > f_pos else kwargs.get(f_name, f_default)):
            return False
    return float(p or 0.0) > 0.0


# Pointwise kernels: each output element is computed from the same element of each argument (after
# broadcasting) and from nothing else, so calls of one such kernel with equal other arguments may be
# replayed together, their tensors stacked along a new leading dimension (see `lane`). Named under
# torch, torch.Tensor, torch.nn.functional and torch.special; the callables are matched by identity.
POINTWISE_NAMES = frozenset({
    "abs", "neg", "negative", "positive", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
    "square", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "erf", "erfc", "erfinv", "sigmoid", "logit", "relu", "relu6", "gelu", "silu", "mish", "elu", "selu",
    "celu", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "softplus", "softsign", "tanhshrink",
    "hardshrink", "softshrink", "threshold", "logsigmoid", "floor", "ceil", "round", "trunc", "frac", "sign", "sgn",
    "clamp", "clip", "clamp_min", "clamp_max", "nan_to_num", "add", "sub", "subtract", "rsub", "mul", "multiply",
    "div", "divide", "true_divide", "floor_divide", "fmod", "remainder", "pow", "float_power", "atan2", "arctan2",
    "hypot", "maximum", "minimum", "fmax", "fmin", "lerp", "addcmul", "addcdiv", "where", "eq", "ne", "lt", "le",
    "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "isnan", "isinf", "isfinite", "signbit", "copysign", "xlogy", "heaviside",
})
_POINTWISE_NAMESPACES = (torch, torch.Tensor, torch.nn.functional, torch.special)
_pointwise_callables: frozenset | None = None


def is_pointwise(func: Any) -> bool:
    """True when `func` is one of the kernel table's pointwise torch callables (by identity)."""
    global _pointwise_callables
    if _pointwise_callables is None:
        _pointwise_callables = frozenset(getattr(ns, name) for ns in _POINTWISE_NAMESPACES for name in POINTWISE_NAMES
                                         if callable(getattr(ns, name, None)))
    try:
        return func in _pointwise_callables
    except TypeError:  # an unhashable callable
        return False


# Multi-output kernels where output k does not read some arguments: {kind: {output index: positions}}.
OUTPUT_IGNORES: dict[str, dict[int, frozenset[str]]] = {
    "multi_head_attention_forward": {1: frozenset({"2", "value"})},  # attention weights never read value
    # flex attention's logsumexp and row maxima are functions of the scores (query, key) alone
    "flex_attention": {1: frozenset({"2", "value"}), 2: frozenset({"2", "value"})},
    "native_multi_head_attention": {1: frozenset({"2", "value"})},  # the fused kernel's weights, likewise
}


def dependence_declared_absent(op: Op, position: str) -> bool:
    """True when the kernel table declares that `op`'s output does not read `position`'s values."""
    if position in SHAPE_ONLY_POSITIONS.get(op.kind, ()):
        return True
    if position in OUTPUT_IGNORES.get(op.kind, {}).get(op.output_index, ()):
        return True
    if op.kind in ITEMWISE_KINDS and op.num_outputs > 1:
        return position not in (f"0.{op.output_index}", str(op.output_index))
    foreign = FOREIGN_DEPENDENCE.get(op.func)
    if foreign is not None and op.output_index in foreign:
        reads = foreign[op.output_index]
        return position not in reads and position.split(".", 1)[0] not in reads
    if op.kind in OVERWRITE_KINDS and position == "0" and _parent_kind(op, position) in UNINITIALISED_KINDS:
        return True  # writing into uninitialised memory: the write, not the garbage, is the data
    if position == "out" or (op.kind in FULL_OVERWRITE_KINDS and position == "0"):
        return True  # a write target whose every element the kernel replaces: its old values are not read
    return False


def _parent_kind(op: Op, position: str) -> str | None:
    """The kind of the op feeding `position` (labels are `<kind>_<ordinal>`, see capture.build)."""
    for edge in op.parents:
        if edge.position == position:
            return edge.source.rsplit("_", 1)[0]
    return None


# -- errors with node context ------------------------------------------------------------
class ReplayError(RuntimeError):
    """A recorded op could not be called again; the message names the op and its site."""

    def __init__(self, op: Op, cause: BaseException) -> None:
        self.op = op
        self.cause = cause
        super().__init__(f"{type(cause).__name__}: {cause}\n  {context(op)}")


def context(op: Op) -> str:
    """'while replaying <label> (<func>) at <source>'."""
    at = f" at {op.source}" if op.source is not None else ""
    return f"while replaying {op.label} ({op.func}){at}"


# -- argument rebuilding ------------------------------------------------------------------
def substitute(args: tuple, kwargs: dict, values: Mapping[str, torch.Tensor]) -> tuple[tuple, dict]:
    """Copies of `args`/`kwargs` with the tensor at each position in `values` replaced."""
    new_args = list(args)
    new_kwargs = dict(kwargs) if kwargs else {}
    for position, value in values.items():
        i = _TOP.get(position)
        if i is not None:  # a top-level positional argument (the common case)
            new_args[i] = value
            continue
        head, _, item = position.partition(".")
        if head.isdigit():
            i = int(head)
            if item:
                seq = list(new_args[i])
                seq[int(item)] = value
                new_args[i] = seq if isinstance(args[i], list) else tuple(seq)
            else:
                new_args[i] = value
        else:
            new_kwargs[position] = value
    return tuple(new_args), new_kwargs


_TOP = {str(i): i for i in range(64)}


def inplace_target_position(op: Op, kwargs: Mapping[str, Any], args: tuple = ()) -> str | None:
    """Where the tensor an in-place op writes sits in its call (by keyword when no positional
    argument is given: `nn.init.uniform_(tensor=w)`, as torch's function handling passes it)."""
    if isinstance(kwargs.get("out"), torch.Tensor):
        return "out"
    if not op.inplace:
        return None
    if not args:
        return next((k for k in ("tensor", "input", "self") if isinstance(kwargs.get(k), torch.Tensor)), "0")
    return "0"


def select_output(out: Any, op: Op, target: torch.Tensor | None) -> torch.Tensor | None:
    """The tensor an op recorded, picked out of its call's return value."""
    if isinstance(out, torch.Tensor):
        return out if op.output_index == 0 else None
    if out is None:
        return target
    from ..capture.walk import shallow_tensors

    items = shallow_tensors(out)
    return items[op.output_index] if op.output_index < len(items) else None


# -- the interpreter -------------------------------------------------------------------------
class Deferred:
    """A live-call argument held by reference (an offloaded weight): replay loads it on demand."""

    def materialize(self) -> torch.Tensor:
        raise NotImplementedError


def _materialized(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def one(a: Any) -> Any:
        if isinstance(a, Deferred):
            return a.materialize()
        if type(a) in (list, tuple) and any(isinstance(b, Deferred) for b in a):
            return type(a)(one(b) for b in a)
        return a

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


class Replayer:
    """Replays single ops: from the live calls of a trace captured in this process, else from the
    call templates a trace file stores (parameters from `params`; foreign callables from `callables`
    and `offline_callables`, see `offline`); loads `Deferred` arguments."""

    def __init__(self, trace: Trace, params: Mapping[str, torch.Tensor] | None = None,
                 callables: Iterable[Any] = ()) -> None:
        self.trace = trace
        self.values = trace.values
        self.calls = trace.live_calls
        self.offline = None if trace.live_calls else OfflineCalls(trace, params, callables)
        self.resolve: Callable[[tuple, dict], tuple[tuple, dict]] | None = (
            _materialized if trace.provenance.deferred_args else None)
        self.autocast: dict[int, Region] = {}  # func_call_id -> the autocast region its replay runs in (see autocast)

    def missing_parents(self, op: Op) -> list[str]:
        return [e.source for e in op.parents if e.source not in self.values]

    def call_of(self, op: Op) -> tuple:
        """`(func, args, kwargs)` of `op`'s call; raises `NotReplayable` when there is none."""
        if self.offline is not None:
            return self.offline.call(op)
        call = self.calls.get(op.label)
        if call is None:
            raise NotReplayable("not replayable: its live call was not saved", check="missing")
        return call

    def run(self, op: Op, override: Mapping[str, torch.Tensor] | None = None, grad: bool = False) -> Any:
        """The op's output recomputed from saved parents (`override`: position -> tensor).

        `grad=True` replays with autograd recording, as a capture with grad enabled ran
        (some kernels pick another algorithm then); the result is detached. A call found to have run
        inside `torch.autocast` (`self.autocast`) is replayed inside that region.
        """
        region = self.autocast.get(op.func_call_id) if self.autocast else None
        if region is not None:
            with region.entered():
                return self._run(op, override, grad)
        return self._run(op, override, grad)

    def _run(self, op: Op, override: Mapping[str, torch.Tensor] | None, grad: bool) -> Any:
        method = getattr(self, _METHODS.get(op.kind, "run_call"))
        try:
            if not grad and not torch.is_grad_enabled():  # validate replays under one no_grad
                return method(op, override or {})
            if grad:
                with torch.enable_grad():
                    out = method(op, _as_recorded(self.trace, op, self.values, override or {}))
                return out.detach() if isinstance(out, torch.Tensor) else out
            with torch.no_grad():
                return method(op, override or {})
        except ReplayError:
            raise
        except Exception as exc:  # any kernel failure becomes a replay failure with context
            raise ReplayError(op, exc) from exc

    def run_input(self, op: Op, override: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.values[op.label]

    run_constant = run_input

    def run_output(self, op: Op, override: Mapping[str, torch.Tensor]) -> torch.Tensor:
        edge = op.parents[0]
        return override.get(edge.position, self.values[edge.source])

    def run_call(self, op: Op, override: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        func, args, kwargs = self.call_of(op)
        if self.resolve is not None:
            args, kwargs = self.resolve(args, kwargs)
        subs = {e.position: self.values[e.source] for e in op.parents}
        subs.update(override)
        target_pos = inplace_target_position(op, kwargs, args)
        if target_pos is not None:
            if target_pos in subs:
                subs[target_pos] = subs[target_pos].clone()
            else:  # writing into a parameter/buffer: never touch the model's own tensor
                live = kwargs[target_pos] if target_pos in kwargs else args[0]
                if isinstance(live, torch.Tensor):
                    subs[target_pos] = live.detach().clone()
        if op.buffer_writes:  # a kernel that updates buffers must update copies, not the model's
            for pos, live in _top_level_tensors(args, kwargs):
                subs.setdefault(pos, live.detach().clone())
        new_args, new_kwargs = substitute(args, kwargs, subs)
        target = subs.get(target_pos) if target_pos is not None else None
        out = func(*new_args, **new_kwargs)
        return select_output(out, op, target)


def _as_recorded(trace: Trace, op: Op, values: Mapping[str, torch.Tensor],
                 override: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every parent value at its position, requiring grad where the recorded parent did."""
    subs: dict[str, torch.Tensor] = {}
    for e in op.parents:
        v = override.get(e.position, values[e.source])
        meta = trace[e.source].out
        if meta is not None and meta.requires_grad and (v.is_floating_point() or v.is_complex()) \
                and not v.is_inference():  # an inference tensor cannot require grad outside inference mode
            v = v.detach().requires_grad_(True)
        subs[e.position] = v
    subs.update({k: v for k, v in override.items() if k not in subs})
    return subs


def _top_level_tensors(args: tuple, kwargs: Mapping[str, Any]) -> list[tuple[str, torch.Tensor]]:
    found = [(str(i), a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    found += [(k, a) for k, a in kwargs.items() if isinstance(a, torch.Tensor)]
    return found


_METHODS = {INPUT_KIND: "run_input", CONSTANT_KIND: "run_constant", OUTPUT_KIND: "run_output"}
