"""Training memory from a backward capture: bytes held for the backward, per module and per layer.

Every tensor an op saves for the backward is counted once: parameters are not (they are held
anyway, and counted as parameters), and a tensor saved by several ops (or that is an op's own
output) is one entry. On a weights-free (meta) trace the bytes are shapes times dtypes: an
estimate of what a real step holds, labelled as such.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError


@dataclass(frozen=True)
class MemoryRow:
    """One module's share of a training step."""

    module: str
    module_class: str
    saved_bytes: int  # held for the backward by ops inside the module (each tensor once)
    param_bytes: int
    grad_bytes: int  # the parameters' gradients (same shapes and dtypes as the parameters that require grad)


@dataclass(frozen=True)
class TrainingMemory:
    """Per-module training memory of one captured step; `estimate` on meta."""

    rows: tuple[MemoryRow, ...]
    total_saved_bytes: int
    total_param_bytes: int
    total_grad_bytes: int
    estimate: bool
    loss: str

    def table(self, top: int | None = None) -> str:
        """A plain-text table (bytes in MiB), the whole model first."""
        rows = self.rows if top is None else self.rows[:top]
        kind = "estimate (meta: shapes x dtypes)" if self.estimate else "measured (real tensors)"
        lines = [f"training memory, {kind}; loss {self.loss}",
                 f"{'module':<40} {'class':<28} {'saved MiB':>10} {'params MiB':>11} {'grads MiB':>10}"]
        for r in rows:
            lines.append(f"{(r.module or '(model)')[:40]:<40} {r.module_class[:28]:<28} {_mib(r.saved_bytes):>10} "
                         f"{_mib(r.param_bytes):>11} {_mib(r.grad_bytes):>10}")
        return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.3f}"


def training_memory(trace: Any) -> TrainingMemory:
    """The per-module training memory of a trace captured with `CaptureOptions(backward=True)`."""
    bw = getattr(trace, "backward", None)
    if bw is None:
        raise InvalidInputError("this trace has no backward", site="training_memory(trace)",
                                remedy="Capture with tracer.trace(..., capture=CaptureOptions(backward=True)).")
    saved_keys: dict[str, dict[str, int]] = {}  # module -> {tensor key -> bytes}
    whole: dict[str, int] = {}
    for label, rows in bw.saved.items():
        op = trace[label]
        addrs = [""] + [addr for addr, _call in op.module_stack]
        for i, s in enumerate(rows):
            if s.alias.startswith("param:"):
                continue
            key = s.alias if s.alias != "new" else f"{label}#{i}"
            whole[key] = s.bytes
            for a in addrs:
                saved_keys.setdefault(a, {})[key] = s.bytes
    params = trace.params
    out = []
    for addr in dict.fromkeys(["", *trace.modules]):
        scope = trace.modules.get(addr)
        prefix = f"{addr}." if addr else ""
        own = [p for name, p in params.items() if name.startswith(prefix) and not p.is_buffer]
        pbytes = sum(_param_bytes(p) for p in own)
        gbytes = sum(_param_bytes(p) for p in own if p.requires_grad)
        out.append(MemoryRow(addr, scope.class_name if scope is not None else trace.model_class,
                             sum(saved_keys.get(addr, {}).values()), pbytes, gbytes))
    weights = [p for p in params.values() if not p.is_buffer]
    return TrainingMemory(tuple(out), sum(whole.values()), sum(_param_bytes(p) for p in weights),
                          sum(_param_bytes(p) for p in weights if p.requires_grad), bool(bw.estimate), bw.loss)


def _param_bytes(p: Any) -> int:
    import torch

    return p.numel * torch.empty((), dtype=getattr(torch, p.dtype.replace("torch.", ""))).element_size()
