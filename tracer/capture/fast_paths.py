"""Fused fast paths: captured as the one fused op the plain forward runs, or disclosed.

Some torch modules run one fused kernel in a plain forward and fall back to their op-by-op
path when a `TorchFunctionMode` is active (how capture records) or hooks are attached. For each
such module call this module decides, from the conditions torch checks that capture does not
change, whether the plain forward would take the fused kernel. If so, a `TransformerEncoderLayer`
or `MultiheadAttention` call runs as in the plain forward (the function mode lifted until the
kernel is called), and the kernel is recorded as one op with its inputs and output (`FusedCall`).
Where that cannot be done (the encoder's nested-tensor sparsity path, another function mode active
beside the capture's), it warns `FastPathNotTakenWarning` and records the finding in the session.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from torch import nn

FAST_PATH_CODE = "fast_path_not_taken"


class FastPathNotTakenWarning(UserWarning):
    """The plain forward runs a fused kernel that the capture's function mode turned off."""

    code = FAST_PATH_CODE


def _why_not_encoder_layer(m: nn.TransformerEncoderLayer, args: tuple, kwargs: dict) -> str | None:
    src = args[0] if args else kwargs.get("src")
    attn = m.self_attn
    tensors = (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
               m.norm1.weight, m.norm1.bias, m.norm2.weight, m.norm2.bias, m.linear1.weight, m.linear1.bias,
               m.linear2.weight, m.linear2.bias)
    masks = [kwargs.get("src_mask", args[1] if len(args) > 1 else None),
             kwargs.get("src_key_padding_mask", args[2] if len(args) > 2 else None)]
    if not isinstance(src, torch.Tensor) or src.dim() != 3:
        return "input not batched"
    if m.training or not attn.batch_first or attn.in_proj_bias is None or not attn._qkv_same_embed_dim:
        return "module configuration"
    if not getattr(m, "activation_relu_or_gelu", False) or m.norm1.eps != m.norm2.eps or attn.num_heads % 2:
        return "module configuration"
    if src.is_nested and any(x is not None for x in masks):
        return "nested input with a mask"
    if any(x._forward_hooks or x._forward_pre_hooks for x in m.modules()):  # capture hooks only modules hooked already
        return "the user's own hooks are attached"
    return _common(m, tensors)


def _why_not_encoder(m: nn.TransformerEncoder, args: tuple, kwargs: dict) -> str | None:
    src = args[0] if args else kwargs.get("src")
    mask = kwargs.get("mask", args[1] if len(args) > 1 else None)
    padding = kwargs.get("src_key_padding_mask", args[2] if len(args) > 2 else None)
    first = m.layers[0] if len(m.layers) else None
    if not isinstance(first, nn.TransformerEncoderLayer) or not getattr(m, "use_nested_tensor", False):
        return "module configuration"
    if first.training or not isinstance(src, torch.Tensor) or src.dim() != 3 or src.is_nested:
        return "module configuration"
    if padding is None or mask is not None:
        return "no padding mask (the sparsity path needs one)"
    attn = first.self_attn
    return _common(m, (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias))


def _why_not_attention(m: nn.MultiheadAttention, args: tuple, kwargs: dict) -> str | None:
    names = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask")
    given = dict(zip(names, args))
    given.update(kwargs)
    q, k, v = given.get("query"), given.get("key"), given.get("value")
    if not isinstance(q, torch.Tensor) or q.dim() != 3 or q is not k or k is not v:
        return "not batched self-attention"
    for mask in (given.get("attn_mask"), given.get("key_padding_mask")):
        if isinstance(mask, torch.Tensor) and torch.is_floating_point(mask):
            return "floating-point mask"
    if m.in_proj_weight is None or m.in_proj_bias is None or q.dtype != m.in_proj_weight.dtype \
            or q.dtype != m.in_proj_bias.dtype:
        return "module configuration"
    if m.training or m.num_heads % 2 or not m.batch_first or m.bias_k is not None or m.bias_v is not None \
            or m.add_zero_attn or not m._qkv_same_embed_dim:
        return "module configuration"
    tensors = (q, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias)
    return _common(m, tensors)


def _common(m: nn.Module, tensors: tuple) -> str | None:
    """The checks torch makes for every fused path, except the ones capture itself fails."""
    if not torch.backends.mha.get_fastpath_enabled() or torch.is_autocast_enabled():
        return "fast path disabled"
    if any(not isinstance(t, torch.Tensor) for t in tensors):
        return "missing tensor"
    if any(t.device.type not in ("cpu", "cuda", "xpu") for t in tensors):
        return "device"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "grad enabled with tensors that require grad"
    return None


_LAST_BITS = "the trace's output may differ from the plain forward's in the last bits"
# Module class -> (its checker, the fused kernel the plain forward calls, what differs).
FUSED_MODULES: dict[type, tuple[Callable[[Any, tuple, dict], str | None], str, str]] = {
    nn.TransformerEncoderLayer: (_why_not_encoder_layer, "torch._transformer_encoder_layer_fwd", _LAST_BITS),
    nn.MultiheadAttention: (_why_not_attention, "torch._native_multi_head_attention", _LAST_BITS),
    nn.TransformerEncoder: (_why_not_encoder, "torch._nested_tensor_from_mask (the sparsity fast path)",
                            "the plain forward drops padded positions into a nested tensor and returns zeros "
                            "there, while the trace's output holds values computed at them"),
}


# Module class -> the torch attribute holding the fused kernel its plain forward calls.
CAPTURABLE: dict[type, str] = {
    nn.TransformerEncoderLayer: "_transformer_encoder_layer_fwd",
    nn.MultiheadAttention: "_native_multi_head_attention",
}


def check(session: Any, module: nn.Module, address: str, args: tuple, kwargs: dict) -> "FusedCall | None":
    """Run the call on its fused kernel (recorded as one op) where the plain forward would (the FusedCall
    entered, to `exit` when the module's forward returns or raises); else warn. None when not fused."""
    checker, kernel, differs = FUSED_MODULES[type(module)]
    try:
        if checker(module, args, kwargs) is not None:
            return None
    except Exception:  # an unusual call signature: the plain path is not known, so claim nothing
        return None
    if _inside_reported(session, address):
        return None  # an enclosing fused module already covers this one
    if type(module) in CAPTURABLE:
        fused = FusedCall(session, module, address)
        if fused.enter():
            return fused
    name = address or "(root)"
    msg = (f"[{FAST_PATH_CODE}] {type(module).__name__} '{name}': the plain forward runs the fused kernel "
           f"{kernel}; under capture torch took the op-by-op path recorded here (its function mode "
           f"turns the fused path off), so {differs}")
    session.fast_paths.append({"code": FAST_PATH_CODE, "module": name, "address": address,
                               "class": type(module).__name__,
                               "path_taken": "op-by-op (recorded ops)", "plain_path": kernel})
    session.warnings.append(msg)
    warnings.warn(msg, FastPathNotTakenWarning, stacklevel=6)  # the line that called the module
    return None


def _inside_reported(session: Any, address: str) -> bool:
    """True when an enclosing module's fused kernel (already reported) replaces this call."""
    return any(f["address"] == "" or address.startswith(f["address"] + ".") for f in session.fast_paths
               if f["class"] != "TransformerEncoder")


class FusedCall:
    """One module call run as the plain forward runs it, its fused kernel recorded as one op.

    Entered when the capture enters the module's scope: the capture's function mode is lifted, so
    torch takes its fused path (capture adds no hooks, which would turn an encoder layer's off); the
    kernel, swapped for a recorder for the duration, restores everything before it is recorded through
    the session. `exit`, run when the module's forward returns or raises, restores state if the kernel
    was never reached (then the call ran unrecorded: a typed warning says so).
    """

    def __init__(self, session: Any, module: nn.Module, address: str) -> None:
        self.session, self.module, self.address = session, module, address
        self.name = CAPTURABLE[type(module)]
        self.original = getattr(torch, self.name)
        self.mode: Any = None
        self.hit = False

    def enter(self) -> bool:
        """Lift the mode; False (nothing changed) unless the capture's mode is the only one."""
        recorder = getattr(self.session, "recorder", None)
        if recorder is None or torch._C._len_torch_function_stack() != 1 \
                or torch._C._get_function_stack_at(0) is not recorder:
            return False  # another mode would still turn the fused path off
        if getattr(self.session, "simulated", None) is not None:
            return False  # under a simulated device the fused path stays off, as while a second mode answered its reads
        self.mode = torch._C._pop_torch_function_stack()
        setattr(torch, self.name, self._kernel)
        return True

    def restore(self, mode: bool = True) -> None:
        """Put back the kernel, and the mode unless told not to yet (idempotent)."""
        setattr(torch, self.name, self.original)
        if mode and self.mode is not None:
            torch._C._push_on_torch_function_stack(self.mode)
            self.mode = None

    def _kernel(self, *args: Any, **kwargs: Any) -> Any:
        self.restore(mode=False)
        self.hit = True
        try:  # recorded as the mode would record it: the mode itself is off while a call runs
            return self.session.on_call(self.original, args, kwargs)
        finally:
            self.restore()

    def exit(self) -> None:
        """The module's forward returned or raised: restore what is still lifted; warn if the kernel never ran."""
        if self.hit:
            return
        self.restore()  # the kernel was never reached: the call ran with nothing recorded
        name = self.address or "(root)"
        msg = (f"[{FAST_PATH_CODE}] {type(self.module).__name__} '{name}': the fused kernel torch.{self.name} was "
               f"expected but not called; the call ran unrecorded, so its output enters the trace as a constant")
        self.session.fast_paths.append({"code": FAST_PATH_CODE, "module": name, "address": self.address,
                                        "class": type(self.module).__name__, "path_taken": "unrecorded",
                                        "plain_path": f"torch.{self.name}"})
        self.session.warnings.append(msg)
        warnings.warn(msg, FastPathNotTakenWarning, stacklevel=6)
