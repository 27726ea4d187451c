"""Recording the backward of a captured forward.

During the forward: a guard links every op output's `grad_fn` to the op, and
`saved_tensors_hooks` attribute each tensor autograd saves to the op running at that moment
(the op whose record comes next). After the forward: the loss is made from the output, a hook
on every autograd node records the order it ran in and its incoming gradients, forward
pre-hooks count module calls re-run during the backward (activation checkpointing), and
`loss.backward()` runs once, exactly as the plain backward would (`param.grad` accumulates).
Every hook is removed afterwards, also when the backward raises.
"""
from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ..capture.boundaries import TORCH_APPLY_CODE
from ..capture.functions import FuncInfo
from ..capture.session import CallGuard, CaptureSession, _held
from ..capture.walk import named_state
from ..errors import BackwardFailedError, InvalidInputError
from ..ir import Op
from .records import BackwardNode, BackwardPass, SavedTensor
from .walk import reachable_nodes

LossFn = Callable[[Any], torch.Tensor]
# Reentrant checkpointing saves its inputs from `CheckpointFunction.apply`, after the region ran.
_REENTRANT = torch.utils.checkpoint.CheckpointFunction


class _LinkGuard(CallGuard):
    """Maps each autograd node to the first op whose output it differentiates."""

    def __init__(self) -> None:
        self.links: dict[Any, int] = {}

    def after_call(self, info: FuncInfo, outputs: list, session: CaptureSession) -> None:
        base = len(session.records) - len(outputs)
        for k, t in enumerate(outputs):
            fn = t.grad_fn
            if fn is not None and fn not in self.links:
                self.links[fn] = base + k


class BackwardRecorder:
    """One capture's backward: `guard` and `saving()` during the forward, then `run`."""

    def __init__(self, session: CaptureSession, save_grads: Any = "all", *, replay: bool = False) -> None:
        self.session = session
        self.save_grads = save_grads
        self.replay = replay
        self.guard = _LinkGuard()
        self.raw: list[list] = []  # [op index, tensor, bytes]; aliases are resolved once the forward is done

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Attribute every tensor autograd saves during the forward to the op being run."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            yield

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        idx = len(self.session.records)
        caller = sys._getframe(1)
        if caller.f_code is TORCH_APPLY_CODE and caller.f_locals.get("cls") is _REENTRANT:
            idx = self._region_start(caller.f_locals.get("args"), idx)
        self.raw.append([idx, t, t.numel() * t.element_size()])
        return t  # held exactly as autograd would hold it (and by `raw` until the records are built)

    def _region_start(self, args: Any, default: int) -> int:
        """The first op of the module a reentrant checkpoint just ran (its inputs are saved after it ran)."""
        module = _module_of(args[0] if args else None)
        addr = self.session.module_addr.get(id(module)) if module is not None else None
        if addr is None:
            return default
        open_call = next((f[3] for f in reversed(self.session.frames) if f[0] == addr), None)
        if open_call is not None:  # its forward checkpointed inside its own call (transformers' layers)
            return open_call
        calls = self.session.module_calls.get(addr)
        return calls[-1][3] if calls else default

    def _alias(self, t: torch.Tensor, ops: tuple[Op, ...]) -> str:
        """What else holds `t`: a parameter (or a view of one), an op's output (its own included), or nothing."""
        s = self.session
        for cand in (t, t._base):
            if cand is None:
                continue
            addr = s.param_ids.get(id(cand))
            if addr is not None:
                return f"param:{addr}"
            hit = s.tmap.get(id(cand))
            if hit is not None and _held(hit[1], cand):
                src = ops[hit[0]]
                return f"{'input' if src.kind == 'input' else 'output'}:{src.label}"
        return "new"

    # -- after the forward -------------------------------------------------------------
    def run(self, output: Any, loss_fn: LossFn | None, ops: tuple[Op, ...], model: nn.Module) -> BackwardPass:
        saved = self._saved(ops)  # before the backward: aliases are read from the forward's records
        loss, described = make_loss(output, loss_fn)
        nodes, index = reachable_nodes(loss.grad_fn)
        links = {index[fn]: i for fn, i in self.guard.links.items() if fn in index}
        order: dict[int, int] = {}
        grad_shapes: dict[int, tuple] = {}
        grads: dict[str, Any] = {}
        node_grads: dict[int, tuple[tuple, tuple]] = {}
        meta = loss.is_meta
        handles = []
        recomputed: dict[str, int] = {}
        try:
            for i, fn in enumerate(nodes):
                handles.append(fn.register_hook(self._node_hook(i, links, ops, order, grad_shapes, grads, meta,
                                                                node_grads)))
            for addr, m in self.session.named:
                handles.append(m.register_forward_pre_hook(_counter(addr, recomputed)))
            loss.backward(retain_graph=self.replay and not meta)
        except Exception as exc:
            raise BackwardFailedError(f"the backward raised {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
                                      site=described, remedy="Check the loss: it must be a scalar that depends on the "
                                      "model's parameters or inputs requiring grad.") from exc
        finally:
            for h in handles:
                h.remove()
        param_of = self.session.param_ids  # id -> the parameter's first address, as the trace records it
        records = []
        for i, fn in enumerate(nodes):
            var = getattr(fn, "variable", None) if type(fn).__name__ == "AccumulateGrad" else None
            nxt = tuple(index[f] for f, _ in fn.next_functions if f is not None)
            op = ops[links[i]].label if i in links else None
            records.append(BackwardNode(index=i, name=fn.name(), op=op,
                                        param=param_of.get(id(var)) if var is not None else None,
                                        next=nxt, order=order.get(i), grad_shapes=grad_shapes.get(i, ())))
        param_grads = {} if meta else {a: t.grad.detach().clone() for a, t in
                                        named_state(model, "_parameters", modules=self.session.every)
                                        if t.grad is not None}  # a tied parameter once, under its first address
        notes = []
        if meta and any(op.func.endswith("scaled_dot_product_attention") for op in ops):
            notes.append("scaled_dot_product_attention on meta takes torch's math path; what a real device saves "
                         "depends on the fused kernel it picks (flash, memory-efficient), so those bytes differ")
        if recomputed:
            notes.append("activation checkpointing: the modules in `recomputed` ran again during the backward; the "
                         "inputs torch.utils.checkpoint saves for that are counted (at the first op of the checkpointed "
                         "module); what the recomputed ops save during the backward is held only while that module's "
                         "backward runs and is not counted")
        if any(type(fn).__name__ == "CheckpointFunctionBackward" for fn in nodes):
            notes.append("reentrant checkpointing: the checkpointed ops ran under no_grad in the forward (listed in "
                         "`no_node`); one CheckpointFunctionBackward node re-runs them and their backward")
        hooked = [a for a, m in self.session.named if m._backward_hooks or m._backward_pre_hooks]
        if hooked:
            notes.append(f"module backward hooks ran (their BackwardHookFunctionBackward nodes are in the graph): "
                         f"{', '.join(hooked[:10])}{', ...' if len(hooked) > 10 else ''}")
        linked = {ops[i].label for i in links.values()}
        no_node = tuple(op.label for op in ops if op.kind not in ("input", "output") and op.label not in linked)
        return BackwardPass(nodes=tuple(records), saved=saved, loss=described, estimate=meta,
                            grads=grads, param_grads=param_grads, no_node=no_node,
                            recomputed={a: c for a, c in recomputed.items() if c}, notes=tuple(notes),
                            node_grads=node_grads, live_nodes=tuple(nodes) if self.replay and not meta else ())

    def _node_hook(self, i, links, ops, order, grad_shapes, grads, meta, node_grads):
        def hook(grad_inputs, grad_outputs):
            order[i] = len(order)
            grad_shapes[i] = tuple(tuple(g.shape) if isinstance(g, torch.Tensor) else None for g in grad_outputs)
            if self.replay and not meta:
                node_grads[i] = (_copies(grad_outputs), _copies(grad_inputs))
            if meta or i not in links or not grad_outputs or not isinstance(grad_outputs[0], torch.Tensor):
                return None
            op = ops[links[i]]
            if self.save_grads == "all" or (callable(self.save_grads) and self.save_grads(op)):
                grads[op.label] = grad_outputs[0].detach().clone()
            return None
        return hook

    def _saved(self, ops: tuple[Op, ...]) -> dict[str, tuple[SavedTensor, ...]]:
        out: dict[str, list[SavedTensor]] = {}
        last = len(ops) - 1
        for idx, t, nbytes in self.raw:
            row = SavedTensor(tuple(t.shape), str(t.dtype).replace("torch.", ""), nbytes, self._alias(t, ops))
            out.setdefault(ops[min(idx, last)].label, []).append(row)
        self.raw = []  # the tensors go with the autograd graph
        return {k: tuple(v) for k, v in out.items()}


def make_loss(output: Any, loss_fn: LossFn | None) -> tuple[torch.Tensor, str]:
    """The scalar to differentiate, and how it was made."""
    if loss_fn is not None:
        loss, described = loss_fn(output), f"loss={getattr(loss_fn, '__name__', 'fn')}(output)"
    else:
        first, where = _first_tensor(output)
        if first is None:
            raise InvalidInputError("the model's output holds no tensor to differentiate", site="trace(loss=None)",
                                    remedy="Pass loss=fn, a callable from the model's output to a scalar tensor.")
        loss, described = first.sum(), f"{where}.sum()"
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise InvalidInputError(f"the loss must be a scalar tensor, got {type(loss).__name__}"
                                f"{'' if not isinstance(loss, torch.Tensor) else ' of shape ' + str(tuple(loss.shape))}",
                                site=described, remedy="Return a scalar (e.g. out.sum() or a loss function's value).")
    if loss.grad_fn is None:
        raise InvalidInputError("the loss does not depend on anything that requires grad", site=described,
                                remedy="Capture with parameters requiring grad, outside torch.no_grad() and "
                                       "without CaptureOptions(inference_only=True).")
    return loss, described


def _first_tensor(output: Any) -> tuple[torch.Tensor | None, str]:
    if isinstance(output, torch.Tensor):
        return output, "output"
    if isinstance(output, dict) or hasattr(output, "keys"):  # a dict or transformers' ModelOutput
        for k in output.keys():
            v = output[k]
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                return v, f"output[{k!r}]"
    if isinstance(output, (tuple, list)):
        for i, v in enumerate(output):
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                return v, f"output[{i}]"
    return None, "output"


def _module_of(fn: Any) -> nn.Module | None:
    """The module a checkpointed callable runs: the module, its bound method, or a partial of either."""
    if isinstance(fn, functools.partial):
        fn = fn.args[0] if fn.args and isinstance(fn.args[0], nn.Module) else fn.func
    module = fn if isinstance(fn, nn.Module) else getattr(fn, "__self__", None)
    return module if isinstance(module, nn.Module) else None


def _counter(addr: str, counts: dict[str, int]):
    def pre_hook(module, args):
        counts[addr] = counts.get(addr, 0) + 1
    return pre_hook


def _copies(grads: tuple) -> tuple:
    return tuple(g.detach().clone() if isinstance(g, torch.Tensor) else None for g in grads)


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t
