"""The forward/backward toggle over the graph column, and the backward rows of the op inspector.

The backward graph is `tracer.backward.graph.backward_trace` drawn by the same `GraphView` over a
state of its own (built on the first switch): the same module nesting, search, folding and "Colour
by" overlays. The two views keep in step: modules opened in one are opened in the other, and a
backward node selected selects the forward op it differentiates (the inspector shows that op, its
gradient statistics and what it saved for the backward); selecting a forward op selects its node.
"""
from __future__ import annotations

import html
from typing import Any

import panel as pn
import param

from tracer.backward.gradients import grad_stats
from tracer.backward.graph import backward_trace
from tracer.backward.memory import op_saved_bytes

from ..sources import Loaded
from ..state import ExplorerState
from .graph import GraphView

FORWARD, BACKWARD = "Forward", "Backward"
BACKWARD_NODE_SOURCE = "tlx-backward-nodes"  # the backward figure's node source (the forward's keeps its name)


class BackwardGraphView(GraphView):
    """The graph view over the backward graph; its node source has a name of its own."""

    def __init__(self, **params):
        super().__init__(**params)
        self._sources["nodes"].data_source.name = BACKWARD_NODE_SOURCE


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for div, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return f"{int(n)} B"


def loss_text(loss: str) -> str:
    """How the loss was made, read as a phrase: `loss output.sum()`, `loss=<lambda>(output)`."""
    return loss if loss.startswith("loss=") else f"loss {loss}"


def backward_rows(trace: Any, label: str) -> list[tuple[str, str]]:
    """Inspector rows for op `label` of a trace with a backward: its node, gradient statistics, saved tensors."""
    bw = getattr(trace, "backward", None)
    if bw is None or label not in trace:
        return []
    rows: list[tuple[str, str]] = []
    node = bw.node_of(label)
    if node is not None:
        ran = f"ran {node.order + 1} of {len(bw.nodes)}" if node.order is not None else "did not run"
        rows.append(("backward node", f"{node.name} ({ran}; passes gradients to {len(node.next)} node(s))"))
    elif label in bw.no_node:
        rows.append(("backward node", "none (no_grad, an integer output, or no input requiring grad)"))
    stats = grad_stats(bw, label)
    if stats is not None:
        grad = bw.grads[label]
        rows.append(("gradient", f"{tuple(grad.shape)} {str(grad.dtype).replace('torch.', '')}"))
        rows += [(f"gradient {k}", f"{stats[k]:.6g}") for k in ("norm", "mean", "std", "min", "max")]
        rows.append(("gradient non-finite", str(stats["non_finite"])))
    elif node is not None:
        rows.append(("gradient", "not saved for this op (save_grads policy)" if bw.grads else
                     "not saved (a weights-free trace, or one saved before gradients were kept, holds no "
                     "gradient values)"))
    saved = bw.saved.get(label, ())
    if saved:
        total = sum(s.bytes for s in saved)
        own = op_saved_bytes(bw).get(label, 0)
        word = "estimated, shapes x dtypes" if bw.estimate else "measured"
        rows.append(("saved for backward", f"{len(saved)} tensor(s), {human_bytes(total)}; {human_bytes(own)} held "
                     f"first by this op ({word})"))
        for i, s in enumerate(saved):
            alias = {"new": "its own tensor"}.get(s.alias, s.alias.replace(":", " ", 1))
            rows.append((f"saved #{i}", f"{s.dtype} {tuple(s.shape)} {human_bytes(s.bytes)} \u00b7 {alias}"))
    elif node is not None:
        rows.append(("saved for backward", "nothing"))
    return rows


def node_brief(btrace: Any, label: str) -> str:
    """One line about backward node `label`: its grad_fn, forward op, gradient norm and saved bytes."""
    op = btrace[label]
    if op.kind == "input":
        return f"{label}: where the backward starts ({btrace.backward.loss})"
    fwd = op.attrs.get("forward_op")
    parts = [f"{label}: {op.kind}", f"differentiates {fwd}" if op.attrs.get("linked") else
             f"inside the derivative of {fwd}" if fwd else "not linked to a forward op"]
    stats = grad_stats(btrace.backward, label)
    if stats is not None:
        parts.append(f"gradient norm {stats['norm']:.4g}")
    saved = btrace.backward.saved.get(label, ())
    if saved:
        parts.append(f"saved {len(saved)} tensor(s), {human_bytes(sum(s.bytes for s in saved))}")
    return " \u00b7 ".join(parts)


def centre_column(graph: GraphView, state: ExplorerState) -> Any:
    """The graph column: `graph` itself, or under a Forward/Backward switch when the trace has a backward."""
    if getattr(state.trace, "backward", None) is None:
        return graph
    return BackwardSwitch(graph=graph, state=state)


class BackwardSwitch(pn.viewable.Viewer):
    """A Forward/Backward switch above the graph; the backward view is built on the first switch."""

    graph = param.ClassSelector(class_=GraphView)
    state = param.ClassSelector(class_=ExplorerState)

    def __init__(self, **params):
        super().__init__(**params)
        self.toggle = pn.widgets.RadioButtonGroup(options=[FORWARD, BACKWARD], value=FORWARD,
                                                  css_classes=["tlx-direction"], margin=(2, 5))
        self.holder = pn.Column(self.graph, sizing_mode="stretch_both", margin=0)
        self.showing: GraphView = self.graph
        self.bstate: ExplorerState | None = None
        self.bgraph: BackwardGraphView | None = None
        self.note = pn.pane.HTML(self._note(), css_classes=["tlx-direction-note"], sizing_mode="stretch_width",
                                 margin=(0, 5))
        self._syncing = False
        self._node_of: dict[str, str] = {}  # forward op -> its node's label in the backward graph
        self.toggle.param.watch(lambda e: self.show(e.new), "value")

    def _note(self) -> str:
        """The line beside the switch: the selected backward node in brief, else the backward's totals."""
        bw = self.state.trace.backward
        kind = "estimate, shapes \u00d7 dtypes" if bw.estimate else "measured"
        ck = f"; checkpointing re-ran {len(bw.recomputed)} module(s)" if bw.recomputed else ""
        text = (f"{len(bw.nodes)} autograd nodes; {human_bytes(sum(op_saved_bytes(bw).values()))} saved for "
                f"backward ({kind}); {loss_text(bw.loss)}{ck}")
        picked = self.bstate.selected if self.bstate is not None and self.showing is self.bgraph else ""
        if picked:
            text = node_brief(self.bstate.trace, picked)
        return (f'<div style="font:12px sans-serif;color:#444;line-height:30px;white-space:nowrap;overflow:hidden;'
                f'text-overflow:ellipsis" title="{html.escape(text, quote=True)}">{html.escape(text)}</div>')

    def backward_view(self) -> BackwardGraphView:
        """The backward graph's view (built once), kept in step with the forward state."""
        if self.bgraph is None:
            loaded = self.state.loaded
            btrace = backward_trace(self.state.trace)
            self.bstate = ExplorerState(Loaded(btrace, f"{loaded.title} (backward)", loaded.origin, loaded.source))
            self.bstate.document = self.state.document  # the same session's page
            self._node_of = {op.attrs["forward_op"]: op.label for op in btrace.ops if op.attrs.get("linked")}
            self.bgraph = BackwardGraphView(state=self.bstate)
            self._follow_forward()
            self.state.param.watch(lambda *_e: self._follow_forward(), ["expanded", "fold_repeats"])
            self.bstate.param.watch(lambda *_e: self._follow_backward(), ["expanded", "fold_repeats"])
            self.state.param.watch(lambda *_e: self._select_node(), ["selected"])
            self.bstate.param.watch(lambda *_e: self._select_op(), ["selected"])
            self.bstate.param.watch(lambda *_e: setattr(self.note, "object", self._note()), ["selected"])
        return self.bgraph

    def show(self, direction: str) -> None:
        """Draw the forward or the backward graph in the column."""
        view = self.backward_view() if direction == BACKWARD else self.graph
        self.showing = view
        self.holder.objects = [view]
        self.note.object = self._note()
        self.state.message = f"{direction} graph shown."

    # -- keeping the two views in step ---------------------------------------------------------
    def _follow_forward(self) -> None:
        known = self.bstate.engine.tree.addresses() | {""}
        expanded = frozenset(a for a in self.state.expanded if a in known) | {""}
        if expanded != self.bstate.expanded or self.bstate.fold_repeats != self.state.fold_repeats:
            self.bstate.param.update(expanded=expanded, fold_repeats=self.state.fold_repeats)

    def _follow_backward(self) -> None:
        known = self.bstate.engine.tree.addresses() | {""}
        expanded = frozenset(a for a in self.state.expanded if a not in known) | self.bstate.expanded
        if expanded != self.state.expanded or self.bstate.fold_repeats != self.state.fold_repeats:
            self.state.param.update(expanded=expanded, fold_repeats=self.bstate.fold_repeats)

    def _select_op(self) -> None:
        """A backward node selected: select the forward op it belongs to (the inspector shows it)."""
        if self._syncing or not self.bstate.selected:
            return
        op = self.bstate.trace[self.bstate.selected].attrs.get("forward_op")
        if op and op != self.state.selected:
            self._syncing = True
            try:
                self.state.select_op(op)
            finally:
                self._syncing = False

    def _select_node(self) -> None:
        """A forward op selected: select its backward node."""
        if self._syncing or not self.state.selected:
            return
        label = self._node_of.get(self.state.selected)
        if label is not None and label != self.bstate.selected:
            self._syncing = True
            try:
                self.bstate.select_op(label)
            finally:
                self._syncing = False

    def __panel__(self):
        return pn.Column(pn.Row(self.toggle, self.note, margin=0, sizing_mode="stretch_width"), self.holder,
                         sizing_mode="stretch_both", css_classes=["tlx-direction-column"])
