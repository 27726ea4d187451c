"""Box sizes, text and colours shared by the layout, the Bokeh figure and the paper figures."""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from tracer.claims import ladder_headline
from tracer.ir import Op

FONT_SIZE = 11.0  # abstract units (1 unit = 1 px at 100 % zoom); text is DejaVu Sans everywhere
FONT_FAMILY = "DejaVu Sans, Verdana, sans-serif"
OP_H = 24.0
MODULE_H = 30.0
FOLDED_H = 38.0
FRAME_PAD = 12.0
FRAME_HEADER = 18.0
HEADER_CHAR_W = 7.0  # a generous width of one bold frame-header character (a header's room for its title)

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


# DejaVu Sans advance widths (thousandths of an em) for ASCII 32..126; other characters count as 0.84 em.
_ADVANCE = (
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636, 636, 636,
    636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656,
    557, 863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500, 500, 613,
    635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612, 635, 635, 411, 521, 392, 634, 592, 818,
    592, 592, 525, 636, 337, 636, 838,
)
_ADVANCE_BOLD = (
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365, 696, 696, 696, 696, 696, 696,
    696, 696, 696, 696, 400, 400, 838, 838, 838, 580, 1000, 774, 762, 734, 830, 683, 683, 821, 837, 372, 372, 775,
    637, 995, 837, 850, 733, 850, 770, 720, 682, 812, 774, 1103, 771, 724, 725, 457, 365, 457, 838, 500, 500, 675,
    716, 593, 716, 678, 435, 716, 712, 343, 343, 665, 343, 1042, 712, 687, 716, 716, 493, 595, 478, 712, 652, 924,
    645, 652, 582, 712, 365, 712, 838,
)
_OTHER = 838  # "×", "…" and anything outside ASCII: a wide glyph, so an estimate errs on the safe side


def text_width(text: str, size: float = FONT_SIZE, bold: bool = False) -> float:
    """Width of `text` set in DejaVu Sans at `size` units (advance widths summed, no kerning)."""
    table = _ADVANCE_BOLD if bold else _ADVANCE
    total = sum(table[o - 32] if 32 <= (o := ord(c)) < 127 else _OTHER for c in text)
    return total * size / 1000.0


def box_width(label: str, pad: float = 14.0) -> float:
    """Width of a box that holds `label` with `pad` units of margin in all."""
    return text_width(label) + pad


def header_width(label: str) -> float:
    """Width a frame needs for its bold header label (6 units either side)."""
    return text_width(label, bold=True) + 12.0


def fit_text(text: str, width: float, size: float = FONT_SIZE, bold: bool = False) -> str:
    """`text` cut with an ellipsis so it is at most `width` wide (unchanged when it fits)."""
    if text_width(text, size, bold) <= width:
        return text
    while text and text_width(text + "…", size, bold) > width:
        text = text[:-1]
    return text + "…" if text else ""


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
