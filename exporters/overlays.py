"""Numbers drawn over a trace's graph: per-op values, module roll-ups, a colour scale and its legend.

One implementation feeds every view: the self-contained HTML file, paper figures, Model Explorer
node data and `snapshot --overlay`. Built-in overlays (`BUILTIN`): parameters read, output bytes
and FLOPs (estimates from shapes, see `tracer.estimates`), the claim state, and activation
statistics (mean, std, max |x|, non-finite count) for traces that saved values, and the bytes each
collective of a sharded trace sends (`comm_bytes`, docs/distributed.md). A user overlay is
a mapping `{op label or module path: number}`. A drawn box's value is its op's value, or the roll-up
(`sum` or `max`) of the ops drawn inside it; a module path the user named gives that box directly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from .errors import OverlayOptionsError
from tracer.estimates import op_flops, op_output_bytes
from tracer.ir import Op, Trace

if TYPE_CHECKING:
    from .layout import Layout

STRUCTURE_OVERLAYS = ("parameters", "output_bytes", "flops", "claim_state")
VALUE_OVERLAYS = ("act_mean", "act_std", "act_max_abs", "act_nonfinite")
BACKWARD_OVERLAYS = ("saved_bytes", "grad_norm")  # traces captured with CaptureOptions(backward=True)
COMM_OVERLAYS = ("comm_bytes",)  # traces with collectives (a sharded model's rank, gathered or simulated)
BUILTIN = STRUCTURE_OVERLAYS + VALUE_OVERLAYS + BACKWARD_OVERLAYS + COMM_OVERLAYS
TITLES = {
    "parameters": "parameters read", "output_bytes": "output bytes (estimate)", "flops": "FLOPs (estimate)",
    "claim_state": "claim state", "act_mean": "activation mean", "act_std": "activation std",
    "act_max_abs": "activation max |x|", "act_nonfinite": "non-finite activations", "user": "user values",
    "saved_bytes": "saved for backward (bytes)", "grad_norm": "gradient norm",
    "comm_bytes": "communication (wire bytes per collective)",
}
ROLLUPS = ("sum", "max")
SCALES = ("linear", "log")
# Light yellow to dark red: the low end keeps black text legible; `text_color` flips to white past 70 %.
PALETTE = ("#fff7bc", "#fee391", "#fec44f", "#fe9929", "#ec7014", "#cc4c02", "#8c2d04")
NO_VALUE = "#eeeeee"
CLAIM_COLORS = {"OBSERVED": "#c8e6c9", "CORROBORATED": "#bbdefb", "HYPOTHESIS": "#fff59d", "REFUTED": "#ffcdd2"}
CHUNK = 1 << 20  # elements per chunk when reducing a saved tensor


@dataclass(frozen=True, slots=True)
class Overlay:
    """Per-op values (`ops`), values the user gave whole modules (`modules`), and how to name them."""

    name: str
    title: str
    ops: Mapping[str, Any]
    modules: Mapping[str, float] = field(default_factory=dict)
    categorical: bool = False  # values are words (claim state), coloured by `CLAIM_COLORS`


def available(trace: Trace) -> tuple[str, ...]:
    """The built-in overlays this trace can show (activation statistics only with saved values; saved-for-
    backward bytes with a backward, gradient norms with its saved gradients)."""
    return (STRUCTURE_OVERLAYS + (VALUE_OVERLAYS if trace.values else ()) + backward_overlays(trace)
            + (COMM_OVERLAYS if _has_collectives(trace) else ()))


def _has_collectives(trace: Trace) -> bool:
    """Whether any op is a collective (only a sharded trace's can be: the others are not scanned)."""
    return bool(trace.provenance.distributed) and any(op.collective is not None for op in trace.ops)


def backward_overlays(trace: Trace) -> tuple[str, ...]:
    """"saved_bytes" when the trace has a backward, "grad_norm" too when it kept gradients."""
    bw = getattr(trace, "backward", None)
    if bw is None:
        return ()
    return ("saved_bytes", "grad_norm") if bw.grads else ("saved_bytes",)


def comm_bytes(trace: Trace) -> dict[str, int]:
    """Each collective op's wire bytes (what this rank sends, ring estimate; labelled estimates on a simulated
    mesh): the "comm_bytes" overlay. A module's box rolls them up (sum): the bytes a layer communicates."""
    return {op.label: op.collective.wire_bytes for op in trace.ops if op.collective is not None}


def build_overlay(trace: Trace, spec: str | Mapping[str, float], title: str | None = None, *,
                  stats: Mapping[str, Mapping[str, float]] | None = None) -> Overlay:
    """The overlay named `spec` (one of `BUILTIN`) or a user overlay `{op label or module path: number}`."""
    if isinstance(spec, Mapping):
        return _user_overlay(trace, spec, title or TITLES["user"])
    if spec not in available(trace):
        why = (" (this trace saved no values)" if spec in VALUE_OVERLAYS else
               " (capture with CaptureOptions(backward=True); gradient norms need saved gradients)"
               if spec in BACKWARD_OVERLAYS else " (this trace holds no collective)" if spec in COMM_OVERLAYS else "")
        raise OverlayOptionsError(f"unknown overlay {spec!r}{why}; pick one of {available(trace)}",
                                  site="exporters.overlays.build_overlay", overlay=str(spec))
    if spec == "claim_state":
        state = trace.ladder_state
        return Overlay(spec, f"{TITLES[spec]} ({state})", {op.label: state for op in trace.ops}, categorical=True)
    if spec in VALUE_OVERLAYS:
        key = spec[4:]
        stats = activation_stats(trace) if stats is None else stats
        return Overlay(spec, title or TITLES[spec], {label: s[key] for label, s in stats.items()})
    if spec == "saved_bytes":
        from tracer.backward.memory import op_saved_bytes

        return Overlay(spec, title or TITLES[spec], op_saved_bytes(trace.backward))
    if spec == "grad_norm":
        from tracer.backward.gradients import grad_norms

        return Overlay(spec, title or TITLES[spec], grad_norms(trace.backward))
    if spec == "comm_bytes":
        estimated = any(op.collective.estimated for op in trace.ops if op.collective is not None)
        return Overlay(spec, title or TITLES[spec] + (" (estimates)" if estimated else ""), comm_bytes(trace))
    value = op_value_fn(trace, spec)
    return Overlay(spec, title or TITLES[spec], {op.label: value(op) for op in trace.ops})


def build_overlays(trace: Trace, names: Iterable[str]) -> list[Overlay]:
    """Several built-in overlays, reducing saved activations once for all four statistics."""
    names = list(names)
    stats = activation_stats(trace) if any(n in VALUE_OVERLAYS for n in names) else None
    return [build_overlay(trace, n, stats=stats) for n in names]


def op_value_fn(trace: Trace, name: str) -> Callable[[Op], int]:
    """The per-op function of a structural overlay ("parameters", "output_bytes" or "flops")."""
    if name == "output_bytes":
        return op_output_bytes
    if name == "flops":
        return lambda op: op_flops(op, trace)
    if name != "parameters":
        raise OverlayOptionsError(f"{name!r} is not a structural overlay", site="exporters.overlays.op_value_fn")
    numel = {}
    for rec in trace.params.values():
        for address in (rec.address, *rec.tied):
            numel[address] = 0 if rec.is_buffer else rec.numel
    return lambda op: sum(numel.get(p, 0) for p in op.params)


def _user_overlay(trace: Trace, spec: Mapping[str, float], title: str) -> Overlay:
    ops, modules, unknown = {}, {}, []
    for key, value in spec.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise OverlayOptionsError(f"overlay value for {key!r} is not a number: {value!r}",
                                      site="exporters.overlays.build_overlay", key=str(key)) from None
        if key in trace:
            ops[key] = number
        elif key in trace.modules:
            modules[key] = number
        else:
            unknown.append(key)
    if unknown:
        raise OverlayOptionsError(f"{len(unknown)} overlay key(s) name neither an op label nor a module path: "
                                  f"{sorted(map(str, unknown))[:5]}", site="exporters.overlays.build_overlay",
                                  unknown=[str(u) for u in unknown])
    return Overlay("user", title, ops, modules)


# -- activation statistics -------------------------------------------------------------
def activation_stats(trace: Trace, chunk: int = CHUNK) -> dict[str, dict[str, float]]:
    """Mean, std, max |x| and non-finite count of every saved tensor, reduced chunk by chunk."""
    out = {}
    for label, value in trace.values.items():
        stats = tensor_stats(value, chunk)
        if stats is not None:
            out[label] = stats
    return out


def tensor_stats(value: Any, chunk: int = CHUNK) -> dict[str, float] | None:
    """The overlay's statistics of one tensor (None for non-tensors): `tracer.tensor_stats`, which widens
    one chunk at a time, as mean, population std, max |x| and non-finite count (complex: of |x|)."""
    import torch

    from tracer.tensor_stats import tensor_stats as chunked_stats

    if not isinstance(value, torch.Tensor) or value.is_meta or value.numel() == 0:
        return None
    flat = value.detach().reshape(-1)
    s = chunked_stats(flat.abs() if flat.is_complex() else flat, chunk)
    n = s["numel"] - s["non_finite"]
    if not n:
        return {"mean": 0.0, "std": 0.0, "max_abs": 0.0, "nonfinite": float(s["non_finite"])}
    return {"mean": s["mean"], "std": s["std"] * math.sqrt((n - 1) / n),
            "max_abs": max(abs(s["min"]), abs(s["max"])), "nonfinite": float(s["non_finite"])}


# -- roll-ups and colours -----------------------------------------------------------------
def rollup(values, how: str = "sum") -> float | None:
    """Sum or max of the numbers in `values` (None when there are none)."""
    if how not in ROLLUPS:
        raise OverlayOptionsError(f"unknown roll-up {how!r}; pick one of {ROLLUPS}", site="exporters.overlays.rollup")
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not nums:
        return None
    return sum(nums) if how == "sum" else max(nums)


def node_values(layout: "Layout", overlay: Overlay, how: str = "sum") -> dict[str, Any]:
    """Each drawn box's value: its op's value, a module the user named, or the roll-up of the ops inside."""
    inside: dict[str, list[str]] = {}
    for label, node_id in layout.visible.items():
        inside.setdefault(node_id, []).append(label)
    out: dict[str, Any] = {}
    for n in layout.nodes:
        if n.kind == "module" and n.module in overlay.modules:
            out[n.id] = overlay.modules[n.module]
            continue
        labels = inside.get(n.id, [])
        vals = [overlay.ops[lb] for lb in labels if lb in overlay.ops]
        if overlay.categorical:
            if vals:
                out[n.id] = vals[0] if len(set(vals)) == 1 else "mixed"
            continue
        v = overlay.ops.get(n.id) if n.kind == "op" and n.id in overlay.ops else rollup(vals, how)
        if v is not None and how == "sum" and n.kind == "folded" and n.repeat > 1:
            v = v / n.repeat  # a folded run "xN" is coloured per repetition, on the scale of one block (issue 36)
        if v is not None:
            out[n.id] = v
    return out


@dataclass(frozen=True, slots=True)
class ColorScale:
    """Numbers in [lo, hi] onto `PALETTE`, linearly or by log10 (log ignores values <= 0)."""

    lo: float
    hi: float
    scale: str = "linear"

    def position(self, value: float) -> float | None:
        if self.scale == "log":
            if value <= 0 or self.lo <= 0:
                return None
            lo, hi, v = math.log10(self.lo), math.log10(self.hi), math.log10(value)
        else:
            lo, hi, v = self.lo, self.hi, value
        return 0.5 if hi == lo else min(1.0, max(0.0, (v - lo) / (hi - lo)))

    def color(self, value: Any) -> str:
        if isinstance(value, str):
            return CLAIM_COLORS.get(value, NO_VALUE)
        t = None if value is None or not math.isfinite(value) else self.position(float(value))
        return NO_VALUE if t is None else palette_at(t)


def color_scale(values, scale: str = "linear") -> ColorScale:
    """The scale spanning `values` (log: the positive ones)."""
    if scale not in SCALES:
        raise OverlayOptionsError(f"unknown scale {scale!r}; pick one of {SCALES}", site="exporters.overlays.color_scale")
    nums = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if scale == "log":
        nums = [v for v in nums if v > 0]
    if not nums:
        return ColorScale(0.0, 0.0, scale)
    return ColorScale(min(nums), max(nums), scale)


def palette_at(t: float) -> str:
    """The palette colour at `t` in [0, 1], interpolated between stops."""
    t = min(1.0, max(0.0, t)) * (len(PALETTE) - 1)
    i = min(int(t), len(PALETTE) - 2)
    a, b = _rgb(PALETTE[i]), _rgb(PALETTE[i + 1])
    f = t - i
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b))


def text_color(fill: str) -> str:
    """Black on light fills, white on dark ones."""
    r, g, b = _rgb(fill)
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"


def format_value(value: Any) -> str:
    """A short human reading of a value: 1.2e9 -> '1.2G', 0.0031 -> '0.0031'."""
    if isinstance(value, str):
        return value
    if value is None:
        return "n/a"
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}" if v != int(v) else str(int(v))


FOLDED_NOTE = "folded runs: per repetition"


def legend(overlay: Overlay, scale: ColorScale, how: str, folded: bool = False) -> dict[str, Any]:
    """What a legend shows: the title (with roll-up and scale), and the colour stops with their values;
    `folded` (the view has a folded run and modules are summed) says that runs are coloured per repetition."""
    if overlay.categorical:
        return {"title": overlay.title, "items": [(k, c) for k, c in CLAIM_COLORS.items()]}
    stops = []
    for i in range(5):
        t = i / 4
        if scale.scale == "log" and scale.lo > 0:
            v = 10 ** (math.log10(scale.lo) + t * (math.log10(scale.hi) - math.log10(scale.lo)))
        else:
            v = scale.lo + t * (scale.hi - scale.lo)
        stops.append((format_value(v), palette_at(t)))
    note = f" · {FOLDED_NOTE}" if folded and how == "sum" else ""
    return {"title": f"{overlay.title} · modules: {how} · {scale.scale}{note}", "stops": stops}


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def add_overlay_arguments(parser) -> None:
    """Add `--overlay NAME`, `--overlay-scale` and `--rollup` to an argparse parser (the snapshot command's;
    here, not in `exporters.figures`, so building the parser loads no torch)."""
    parser.add_argument("--overlay", choices=BUILTIN, default=None,
                        help="fill boxes by this value, with a legend (activation statistics need saved values)")
    parser.add_argument("--overlay-scale", choices=SCALES, default="linear", help="colour scale (default linear)")
    parser.add_argument("--rollup", choices=ROLLUPS, default="sum",
                        help="a collapsed module's value from the ops inside it (default sum)")
