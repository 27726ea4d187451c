"""Estimated bytes and FLOPs per op, from shapes alone (labelled estimates, never measurements).

FLOPs count a multiply-add as two operations for matrix products and convolutions;
elementwise ops count one per output element; data movement ops count zero.
"""
from __future__ import annotations

from .ir import CONSTANT_KIND, INPUT_KIND, OUTPUT_KIND, Op, Trace

_DTYPE_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

_MOVEMENT = frozenset(
    {"view", "reshape", "transpose", "permute", "contiguous", "expand", "expand_as", "unsqueeze", "squeeze",
     "getitem", "setitem", "split", "chunk", "cat", "stack", "to", "type_as", "T", "t", "flatten", "unflatten",
     "view_as", "narrow", "select", "index_select", "gather", "clone", "detach", "repeat", "slice",
     "arange", "zeros", "ones", "full", "empty", "tensor", "zeros_like", "ones_like", "empty_like",
     "full_like", "dropout", "float", "half", "bfloat16", "long", "int", "bool", "embedding", "copy_",
     "masked_fill", "masked_fill_", "tril", "triu", "where", INPUT_KIND, OUTPUT_KIND, CONSTANT_KIND}
)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype named as torch prints it without the prefix (`float32`)."""
    return _DTYPE_BYTES.get(dtype.replace("torch.", ""), 4)


def op_output_bytes(op: Op) -> int:
    """Estimated bytes of the op's output tensor."""
    if op.out is None:
        return 0
    return op.out.numel * dtype_bytes(op.out.dtype)


def op_flops(op: Op, trace: Trace) -> int:
    """Estimated FLOPs of one op, from its output shape and its parents' and parameters' shapes."""
    if op.out is None or op.kind in _MOVEMENT:
        return 0
    out = op.out.numel
    if op.kind in ("linear", "addmm", "matmul", "mm", "bmm", "baddbmm", "einsum"):
        k = _contraction_dim(op, trace)
        return 2 * out * k if k else out
    if op.kind.startswith("conv"):
        weight = next((trace.params[p] for p in op.params if p in trace.params and len(trace.params[p].shape) >= 3), None)
        if weight is not None:
            per_out = 1
            for d in weight.shape[1:]:
                per_out *= d
            return 2 * out * per_out
        return out
    if op.kind == "scaled_dot_product_attention":
        shapes = [trace[e.source].out.shape for e in op.parents[:2] if trace[e.source].out is not None]
        if len(shapes) == 2 and len(shapes[0]) >= 2 and len(shapes[1]) >= 2 and len(op.out.shape) >= 1:
            q, k = shapes
            lq, d = q[-2], q[-1]
            lk = k[-2]
            batch = out // max(lq * op.out.shape[-1], 1)
            return 2 * batch * lq * lk * (d + op.out.shape[-1])
        return out  # a query, key or output recorded with fewer dims than attention has: counted as elementwise
    if op.kind in ("layer_norm", "rms_norm", "group_norm", "batch_norm", "softmax", "log_softmax"):
        return 5 * out
    return out


def _contraction_dim(op: Op, trace: Trace) -> int:
    for addr in op.params:
        rec = trace.params.get(addr)
        if rec is not None and len(rec.shape) == 2:
            # linear: weight (out, in); GPT-2 Conv1D addmm: weight (in, out)
            return rec.shape[1] if op.kind == "linear" else rec.shape[0]
    for edge in op.parents:
        src = trace[edge.source].out
        if src is not None and len(src.shape) >= 1 and edge.position in ("0", "input", "1", "mat1"):
            if op.kind == "addmm" and edge.position != "1":
                continue
            return src.shape[-1]
    return 0


def trace_totals(trace: Trace) -> dict[str, int]:
    """Estimated totals: FLOPs, output bytes of every op, and parameter bytes (tied counted once)."""
    flops = sum(op_flops(op, trace) for op in trace.ops)
    act = sum(op_output_bytes(op) for op in trace.ops if op.kind not in (OUTPUT_KIND,))
    param_bytes = sum(r.numel * dtype_bytes(r.dtype) for r in trace.params.values())
    return {"flops_estimate": flops, "activation_bytes_estimate": act, "param_bytes": param_bytes}
