"""The backward graph as a trace of its own: one op per autograd node, in the forward's module nesting.

Every view that draws or exports a `Trace` (the layout engine, figures, Model Explorer) draws the
backward with it. A node linked to a forward op sits in that op's module call, labelled
`grad_<op label>`; an `AccumulateGrad` node sits beside the first op that read its parameter,
labelled `grad_<parameter address>`; a node internal to an op's derivative (e.g. the transpose of
a linear weight) sits where the node that passed it gradients sits, labelled `<grad_fn>_<index>`.
The scalar loss enters as the input `loss`. Ops run in backward execution order (nodes that never
ran come last, still after every node that feeds them); an edge carries a gradient from a node to
the one it passes it to. The graph's trace carries the backward pass re-keyed to its own labels,
so overlays and the inspector read saved bytes and gradients on either graph the same way.
"""
from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Any

from ..ir import EMPTY_STACK, Edge, ModuleCallRecord, ModuleScope, Op, TensorMeta, Trace
from .records import BackwardPass

BACKWARD_SUFFIX = " (backward)"
LOSS_LABEL = "loss"


def backward_trace(trace: Trace) -> Trace:
    """The backward graph of `trace` (captured with `CaptureOptions(backward=True)`) as a Trace."""
    from ..errors import InvalidInputError

    bw: BackwardPass | None = getattr(trace, "backward", None)
    if bw is None:
        raise InvalidInputError("this trace has no backward", site="backward_trace(trace)",
                                remedy="Capture with tracer.trace(..., capture=CaptureOptions(backward=True)).")
    order = _topological(bw)
    labels = _labels(bw)
    reader = _first_reader(trace)
    feeds: dict[int, list[int]] = {}
    for node in bw.nodes:
        for j in node.next:
            feeds.setdefault(j, []).append(node.index)
    root = order[0] if order else None
    device = next((op.out.device for op in trace.ops if op.out is not None), "cpu")
    loss = Op(index=0, label=LOSS_LABEL, kind="input", func="", parents=(), func_call_id=0, io_path="loss",
              out=TensorMeta((), _dtype_of(trace, bw, root) if root is not None else "float32", device),
              attrs={"backward_loss": bw.loss})
    ops: list[Op] = [loss]
    home: dict[int, tuple[Any, str | None]] = {}  # node -> (module stack, the forward op it belongs to)
    for i in order:
        node = bw.nodes[i]
        fwd: str | None = node.op
        if fwd is not None:
            stack = trace[fwd].module_stack
        elif node.param is not None and node.param in reader:
            fwd = reader[node.param]
            stack = trace[fwd].module_stack
        else:
            first = next((home[p] for p in sorted(feeds.get(i, ()), key=lambda p: _rank(bw, p)) if p in home), None)
            stack, fwd = first if first is not None else (EMPTY_STACK, None)
        home[i] = (stack, fwd)
        parents = tuple(Edge(labels[p], str(k)) for k, p in enumerate(feeds.get(i, ())))
        if i == root:
            parents = (Edge(LOSS_LABEL, "0"),)
        stack_t = tuple(stack)
        name = short_name(node.name)
        ops.append(Op(index=len(ops), label=labels[i], kind=name, func=f"autograd.{name}", parents=parents,
                      out=_grad_meta(trace, bw, node, device), func_call_id=len(ops),
                      module=stack_t[-1][0] if stack_t else "", module_call=stack_t[-1][1] if stack_t else 0,
                      module_stack=stack, params=(node.param,) if node.param else (),
                      attrs={"backward_node": i, "forward_op": fwd, "order": node.order,
                             "linked": node.op is not None}))
    by_op = {bw.nodes[i].op: labels[i] for i in order if bw.nodes[i].op is not None}
    nodes = tuple(replace(n, op=by_op[n.op]) if n.op in by_op else replace(n, op=None) if n.op is not None else n
                  for n in bw.nodes)
    rekeyed = replace(bw, nodes=nodes, saved={by_op[k]: v for k, v in bw.saved.items() if k in by_op},
                      grads={by_op[k]: v for k, v in bw.grads.items() if k in by_op},
                      node_grads={}, live_nodes=(), no_node=())  # no_node names forward ops, absent here
    graph = Trace(ops=tuple(ops), modules=_backward_modules(trace.modules, ops), params=trace.params,
                  model_class=trace.model_class + BACKWARD_SUFFIX, provenance=trace.provenance, backward=rekeyed)
    if trace.envelope is None:
        return graph
    from ..claims.envelope import seal_new_envelope  # its own claims (HYPOTHESIS): the forward's are not this graph's

    return graph.with_envelope(seal_new_envelope(graph))


def _backward_modules(modules: dict[str, ModuleScope], ops: list[Op]) -> dict[str, ModuleScope]:
    """The forward's module scopes with each call re-spanned over the backward's ops.

    A call's span, inputs (ops outside it that pass gradients in) and outputs (ops inside it that
    pass gradients out) refer to the backward graph's own labels; a call no backward node sits in
    spans nothing (-1), as a forward call that recorded no op does.
    """
    inside: dict[tuple[str, int], list[Op]] = {}
    for op in ops:
        for key in dict.fromkeys(op.module_stack):
            inside.setdefault(key, []).append(op)
    children: dict[str, list[Op]] = {}
    for op in ops:
        for edge in op.parents:
            children.setdefault(edge.source, []).append(op)
    out: dict[str, ModuleScope] = {}
    for addr, scope in modules.items():
        calls = []
        for call in scope.calls:
            members = inside.get((addr, call.call), [])
            if not members:
                calls.append(ModuleCallRecord(call.call, (), (), -1, -1))
                continue
            labels = {op.label for op in members}
            feeds = tuple(dict.fromkeys(e.source for op in members for e in op.parents if e.source not in labels))
            gives = tuple(op.label for op in members
                          if any(c.label not in labels for c in children.get(op.label, ())))
            calls.append(ModuleCallRecord(call.call, feeds, gives, members[0].index, members[-1].index))
        out[addr] = replace(scope, calls=tuple(calls))
    return out


def short_name(name: str) -> str:
    """A grad_fn name without its C++ namespace: `torch::autograd::AccumulateGrad` -> `AccumulateGrad`."""
    return name.rsplit("::", 1)[-1]


def node_labels(trace: Trace) -> dict[int, str]:
    """Node index -> its label in `backward_trace(trace)`."""
    return _labels(trace.backward)


def _labels(bw: BackwardPass) -> dict[int, str]:
    out: dict[int, str] = {}
    used = {LOSS_LABEL}
    for node in bw.nodes:
        base = (f"grad_{node.op}" if node.op is not None else f"grad_{node.param}" if node.param is not None
                else f"{short_name(node.name)}_{node.index}")
        label, k = base, 1
        while label in used:
            k += 1
            label = f"{base}_{k}"
        used.add(label)
        out[node.index] = label
    return out


def _rank(bw: BackwardPass, i: int) -> tuple[int, int]:
    order = bw.nodes[i].order
    return (order if order is not None else 1 << 62, i)


def _topological(bw: BackwardPass) -> list[int]:
    """Node indices in execution order; nodes that never ran after everything feeding them."""
    indeg = [0] * len(bw.nodes)
    for node in bw.nodes:
        for j in node.next:
            indeg[j] += 1
    ready = [(_rank(bw, i), i) for i in range(len(bw.nodes)) if indeg[i] == 0]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(i)
        for j in bw.nodes[i].next:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, (_rank(bw, j), j))
    return out


def _first_reader(trace: Trace) -> dict[str, str]:
    """Parameter address (and each tied alias's first address) -> the first op that read it."""
    first_addr = {alias: rec.address for rec in trace.params.values() for alias in (rec.address, *rec.tied)}
    out: dict[str, str] = {}
    for op in trace.ops:
        for p in op.params:
            out.setdefault(first_addr.get(p, p), op.label)
    return out


def _dtype_of(trace: Trace, bw: BackwardPass, i: int) -> str:
    node = bw.nodes[i]
    if node.op is not None and trace[node.op].out is not None:
        return trace[node.op].out.dtype
    if node.param is not None and node.param in trace.params:
        return trace.params[node.param].dtype
    return "float32"


def _grad_meta(trace: Trace, bw: BackwardPass, node: Any, device: str) -> TensorMeta | None:
    """The gradient a node receives: its recorded shape, the dtype of what it differentiates."""
    if node.param is not None and node.param in trace.params:
        rec = trace.params[node.param]
        return TensorMeta(tuple(rec.shape), rec.dtype, rec.device)
    shape = next((s for s in node.grad_shapes if s is not None), None)
    if shape is None and node.op is not None and trace[node.op].out is not None:
        shape = trace[node.op].out.shape
    if shape is None:
        return None
    return TensorMeta(tuple(shape), _dtype_of(trace, bw, node.index), device)
