"""Box sizes, text and colours shared by the layout, the Bokeh figure and the paper figures."""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from tracer.claims.ladder import ladder_headline
from tracer.ir import Op

CHAR_W = 6.6  # abstract units per character at FONT_SIZE (DejaVu Sans, ~11 px)
FONT_SIZE = 11.0
OP_H = 24.0
MODULE_H = 30.0
FOLDED_H = 38.0
FRAME_PAD = 12.0
FRAME_HEADER = 18.0

KIND_COLORS = {
    "io": "#f2f2f2",
    "module": "#dbe8f6",
    "folded": "#c6dcf2",
}
OP_FAMILY_COLORS = {
    "compute": "#fbd7a5",   # linear, matmul, conv, attention, embedding
    "norm": "#d4ecd0",
    "activation": "#f6c9cf",
    "arith": "#fff3bf",
    "shape": "#ececec",
    "constant": "#e6e0f2",
}
_COMPUTE = ("linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "conv", "embedding", "attention", "einsum")
_NORM = ("norm", "rsqrt")
_ACT = ("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "swish", "elu", "mish", "hardtanh")
_ARITH = ("add", "sub", "mul", "div", "pow", "mean", "sum", "exp", "log", "sqrt", "neg", "cos", "sin", "max", "min")


def shape_text(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return ""
    return "×".join(str(d) for d in shape) if shape else "scalar"


def op_family(op: Op) -> str:
    """A coarse family of an op's kind, for colouring."""
    k = op.kind.lower()
    if op.kind == "constant":
        return "constant"
    if any(c in k for c in _COMPUTE):
        return "compute"
    if any(c in k for c in _NORM):
        return "norm"
    if any(c in k for c in _ACT):
        return "activation"
    if any(k == c or k.startswith(c + "_") or k.endswith("_" + c) for c in _ARITH):
        return "arith"
    return "shape"


def fill_color(node_kind: str, family: str | None = None) -> str:
    if node_kind == "op" and family is not None:
        return OP_FAMILY_COLORS.get(family, OP_FAMILY_COLORS["shape"])
    return KIND_COLORS.get(node_kind, "#ffffff")


def text_width(text: str) -> float:
    return len(text) * CHAR_W


def ladder_caption(state: str, model_class: str = "") -> str:
    """The caption sentence for a ladder state: `tracer.claims.Ladder`'s headline (unknown states named as they are)."""
    text = ladder_headline(state)
    return f"{model_class} | {text}" if model_class else text


# Edges: ordinary, declared back-edges, and "broadcast" edges of a box that feeds or gathers many
# others (rotary position embeddings into every decoder layer, every layer into the KV-cache
# outputs), drawn light so they do not hide the rest.
EDGE = "#6b6b6b"
BACK_EDGE = "#b0413e"
BROADCAST_EDGE = "#c9ced6"
BROADCAST_FAN_OUT = 8


def edge_colors(edges: "Sequence[Any]") -> list[str]:
    """One colour per layout edge, in order (see the constants above)."""
    fan_out = Counter(e.source for e in edges)
    fan_in = Counter(e.target for e in edges)
    return [BACK_EDGE if e.back_edge
            else BROADCAST_EDGE if max(fan_out[e.source], fan_in[e.target]) >= BROADCAST_FAN_OUT
            else EDGE for e in edges]
