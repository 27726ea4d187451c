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
    bw = _backward_of(trace, "training_memory(trace)")
    saved_keys, whole = _saved_keys(trace)
    params = trace.params
    out = []
    for addr in dict.fromkeys(["", *trace.modules]):
        scope = trace.modules.get(addr)
        pbytes, gbytes = _weights_under(params, addr)
        out.append(MemoryRow(addr, scope.class_name if scope is not None else trace.model_class,
                             sum(saved_keys.get(addr, {}).values()), pbytes, gbytes))
    pbytes, gbytes = _weights_under(params, "")
    return TrainingMemory(tuple(out), sum(whole.values()), pbytes, gbytes, bool(bw.estimate), bw.loss)


def _backward_of(trace: Any, site: str) -> Any:
    bw = getattr(trace, "backward", None)
    if bw is None:
        raise InvalidInputError("this trace has no backward", site=site,
                                remedy="Capture with tracer.trace(..., capture=CaptureOptions(backward=True)).")
    return bw


def _saved_keys(trace: Any) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Module -> {saved tensor key -> bytes} (every module around a saving op), and every key once."""
    saved_keys: dict[str, dict[str, int]] = {}
    whole: dict[str, int] = {}
    for label, rows in trace.backward.saved.items():
        op = trace[label]
        addrs = [""] + [addr for addr, _call in op.module_stack]
        for i, s in enumerate(rows):
            if s.alias.startswith("param:"):
                continue
            key = s.alias if s.alias != "new" else f"{label}#{i}"
            whole[key] = s.bytes
            for a in addrs:
                saved_keys.setdefault(a, {})[key] = s.bytes
    return saved_keys, whole


def _weights_under(params: Any, addr: str) -> tuple[int, int]:
    """(parameter bytes, gradient bytes) of the parameters under module `addr` (buffers excluded)."""
    prefix = f"{addr}." if addr else ""
    own = [p for name, p in params.items() if name.startswith(prefix) and not p.is_buffer]
    return sum(_param_bytes(p) for p in own), sum(_param_bytes(p) for p in own if p.requires_grad)


def op_saved_bytes(backward: Any) -> dict[str, int]:
    """Bytes each forward op holds for the backward, each tensor counted once: at the first op that saved it.

    Parameters are not counted (they are held anyway); summed over any set of ops, nothing is counted twice.
    """
    seen: set[str] = set()
    out: dict[str, int] = {}
    for label, rows in backward.saved.items():
        total = 0
        for i, s in enumerate(rows):
            key = s.alias if s.alias != "new" else f"{label}#{i}"
            if s.alias.startswith("param:") or key in seen:
                continue
            seen.add(key)
            total += s.bytes
        out[label] = total
    return out


# -- per layer ------------------------------------------------------------------------------
REST = "(rest)"


@dataclass(frozen=True)
class LayerRow:
    """One repeated block (a decoder layer), or everything outside the blocks (`REST`)."""

    layer: str
    module_class: str
    saved_bytes: int  # without activation checkpointing
    saved_bytes_checkpointed: int | None  # with it (None: not captured)
    param_bytes: int
    grad_bytes: int


@dataclass(frozen=True)
class LayerTable:
    """Training memory per layer, with and without activation checkpointing; `estimate` on meta."""

    rows: tuple[LayerRow, ...]
    total_saved_bytes: int
    total_saved_bytes_checkpointed: int | None
    total_param_bytes: int
    total_grad_bytes: int
    estimate: bool
    loss: str
    notes: tuple[str, ...] = ()

    def table(self) -> str:
        """A plain-text table in MiB, one line per layer, then the rest and the total."""
        kind = "estimate (meta: shapes x dtypes)" if self.estimate else "measured (real tensors)"
        lines = [f"training memory per layer, {kind}; loss {self.loss}",
                 f"{'layer':<28} {'class':<22} {'saved MiB':>11} {'ckpt MiB':>11} {'params MiB':>11} {'grads MiB':>10}"]
        for r in (*self.rows, LayerRow("(total)", "", self.total_saved_bytes, self.total_saved_bytes_checkpointed,
                                       self.total_param_bytes, self.total_grad_bytes)):
            ck = "-" if r.saved_bytes_checkpointed is None else _mib(r.saved_bytes_checkpointed)
            lines.append(f"{r.layer[:28]:<28} {r.module_class[:22]:<22} {_mib(r.saved_bytes):>11} {ck:>11} "
                         f"{_mib(r.param_bytes):>11} {_mib(r.grad_bytes):>10}")
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


def layer_blocks(trace: Any) -> tuple[str, ...]:
    """The repeated blocks a per-layer table shows: the numbered children (`layers.0`, `h.3`) of the
    container holding the most of them (ties: the shallowest); none when the model has no such run."""
    runs: dict[str, list[str]] = {}
    for addr in trace.modules:
        parent, _, last = addr.rpartition(".")
        if last.isdigit():
            runs.setdefault(parent, []).append(addr)
    if not runs:
        return ()
    best = max(runs, key=lambda p: (len(runs[p]), -p.count(".")))
    return tuple(sorted(runs[best], key=lambda a: int(a.rpartition(".")[2]))) if len(runs[best]) >= 2 else ()


def layer_table(trace: Any, checkpointed: Any = None) -> LayerTable:
    """Per-layer training memory of a backward capture; with `checkpointed` (the same model and input
    captured under activation checkpointing), its saved bytes beside each layer's."""
    bw = _backward_of(trace, "layer_table(trace)")
    blocks = layer_blocks(trace)
    plain = _layer_saved(trace, blocks)
    ck = _layer_saved(checkpointed, blocks) if checkpointed is not None else None
    rows = []
    for addr in (*blocks, REST):
        scope = trace.modules.get(addr)
        if addr == REST:
            pb, gb = (a - sum(_weights_under(trace.params, b)[k] for b in blocks)
                      for k, a in enumerate(_weights_under(trace.params, "")))
        else:
            pb, gb = _weights_under(trace.params, addr)
        rows.append(LayerRow(addr, scope.class_name if scope is not None else "embedding, head, loss",
                             plain[addr], None if ck is None else ck.get(addr, 0), pb, gb))
    pbytes, gbytes = _weights_under(trace.params, "")
    notes = tuple(dict.fromkeys((*bw.notes, *(checkpointed.backward.notes if checkpointed is not None else ()))))
    return LayerTable(tuple(rows), sum(r.saved_bytes for r in rows),
                      None if ck is None else sum(ck.values()), pbytes, gbytes, bool(bw.estimate), bw.loss, notes)


def _layer_saved(trace: Any, blocks: tuple[str, ...]) -> dict[str, int]:
    """Saved bytes per block and for the rest: each tensor once, in the block of the first op that saved it."""
    _backward_of(trace, "layer_table(checkpointed)")
    out = dict.fromkeys((*blocks, REST), 0)
    for label, nbytes in op_saved_bytes(trace.backward).items():
        stack = {addr for addr, _call in trace[label].module_stack}
        out[next((b for b in blocks if b in stack), REST)] += nbytes
    return out


def training_step_memory(name_or_path: Any, input_shape: Any = (1, 4096), *, dtype: Any = None) -> LayerTable:
    """The weights-free per-layer table of one training step of a transformers config, with and without
    activation checkpointing (two meta captures; bytes are shapes times dtypes)."""
    from ..bridges.transformers import trace_training_step

    plain = trace_training_step(name_or_path, input_shape, dtype=dtype)
    return layer_table(plain, trace_training_step(name_or_path, input_shape, checkpointing=True, dtype=dtype))


def _param_bytes(p: Any) -> int:
    import torch

    return p.numel * torch.empty((), dtype=getattr(torch, p.dtype.replace("torch.", ""))).element_size()
