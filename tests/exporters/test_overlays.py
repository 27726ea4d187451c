"""Overlays: per-op values, chunked activation statistics, roll-ups, scales, and the views they feed."""
from __future__ import annotations

import math

import pytest
import torch

import tracer
from exporters import figures, overlays
from exporters import model_explorer as me
from exporters.layout import LayoutEngine
from tests.models import tiny_gpt2
from tracer.estimates import op_flops


@pytest.fixture(scope="module")
def gpt2_trace():
    return tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))


def test_chunked_stats_match_a_float64_reduction():
    torch.manual_seed(0)
    x = torch.randn(1000, 37) * 3 + 1
    x[3, 4] = float("nan")
    x[7, 1] = float("inf")
    s = overlays.tensor_stats(x, chunk=1000)  # 37 chunks merged
    ref = x.double().reshape(-1)
    ref = ref[torch.isfinite(ref)]
    assert s["nonfinite"] == 2
    assert math.isclose(s["mean"], float(ref.mean()), rel_tol=1e-9)
    assert math.isclose(s["std"], float(ref.std(unbiased=False)), rel_tol=1e-9)
    assert s["max_abs"] == float(ref.abs().max())


def test_builtin_overlays_follow_the_estimates(gpt2_trace):
    flops = overlays.build_overlay(gpt2_trace, "flops")
    assert flops.ops == {op.label: op_flops(op, gpt2_trace) for op in gpt2_trace.ops}
    assert set(overlays.available(gpt2_trace)) == set(overlays.BUILTIN) - set(overlays.BACKWARD_OVERLAYS) - set(
        overlays.COMM_OVERLAYS)  # values, no backward, no collective
    std = overlays.build_overlay(gpt2_trace, "act_std")
    some = next(label for label, v in gpt2_trace.values.items() if isinstance(v, torch.Tensor) and v.numel() > 1
                and v.is_floating_point())
    assert math.isclose(std.ops[some], float(gpt2_trace.values[some].double().std(unbiased=False)), rel_tol=1e-6)


def test_module_rollups_sum_and_max(gpt2_trace):
    ov = overlays.build_overlay(gpt2_trace, "flops")
    layout = LayoutEngine(gpt2_trace).layout()
    block = "mod:transformer.h.0"
    inside = [ov.ops[lb] for lb, node in layout.visible.items() if node == block]
    assert overlays.node_values(layout, ov, "sum")[block] == sum(inside)
    assert overlays.node_values(layout, ov, "max")[block] == max(inside)


def test_user_overlay_by_label_and_module_path(gpt2_trace):
    label = gpt2_trace.ops[3].label
    ov = overlays.build_overlay(gpt2_trace, {label: 2, "transformer.h.1": 9.5})
    layout = LayoutEngine(gpt2_trace).layout()
    values = overlays.node_values(layout, ov)
    assert values["mod:transformer.h.1"] == 9.5
    with pytest.raises(overlays.OverlayOptionsError) as err:
        overlays.build_overlay(gpt2_trace, {"no.such.thing": 1})
    assert err.value.code == "overlay_options_invalid"


def test_scales_and_refusals():
    lin, log = overlays.color_scale([1, 10, 100]), overlays.color_scale([1, 10, 100], "log")
    assert lin.position(10) == pytest.approx(9 / 99) and log.position(10) == pytest.approx(0.5)
    assert log.color(0) == overlays.NO_VALUE
    with pytest.raises(overlays.OverlayOptionsError):
        overlays.color_scale([1], "sqrt")
    with pytest.raises(overlays.OverlayOptionsError):
        overlays.rollup([1], "mean")


def test_structure_only_trace_refuses_activation_overlays():
    from tracer.bridges.transformers import trace_config

    trace = trace_config("gpt2", input_shape=(1, 4))
    assert "act_mean" not in overlays.available(trace)
    with pytest.raises(overlays.OverlayOptionsError, match="saved no values"):
        overlays.build_overlay(trace, "act_mean")


def test_model_explorer_node_data_uses_the_same_values(gpt2_trace):
    ov = overlays.build_overlay(gpt2_trace, "flops")
    results = next(iter(me.node_data(gpt2_trace, "flops").values()))["results"]
    assert {k: r["value"] for k, r in results.items()} == dict(ov.ops)
    assert next(iter(me.node_data(gpt2_trace, "act_max_abs").values()))["name"] == "activation max |x|"


def test_figure_overlay_fills_and_legend(gpt2_trace, tmp_path):
    plain = figures.build_scene(gpt2_trace)
    coloured = figures.build_scene(gpt2_trace, overlay="flops")
    assert plain.legend is None and coloured.legend["title"].startswith("FLOPs (estimate)")
    assert coloured.fills != plain.fills and coloured.height > plain.height
    svg = figures.scene_svg(coloured)
    assert 'class="legend"' in svg and 'class="legend"' not in figures.scene_svg(plain)
    assert figures.snapshot_overlay_options(gpt2_trace, None) == {}
    with pytest.raises(overlays.OverlayOptionsError):
        figures.snapshot_overlay_options(gpt2_trace, "latency")


def test_snapshot_overlay_arguments_parse_and_feed_build_scene(gpt2_trace):
    import argparse

    parser = argparse.ArgumentParser()
    overlays.add_overlay_arguments(parser)
    ns = parser.parse_args(["--overlay", "output_bytes", "--overlay-scale", "log", "--rollup", "max"])
    options = figures.snapshot_overlay_options(gpt2_trace, ns.overlay, ns.overlay_scale, ns.rollup)
    scene = figures.build_scene(gpt2_trace, **options)
    assert scene.legend["title"] == "output bytes (estimate) · modules: max · log"
    with pytest.raises(SystemExit):
        parser.parse_args(["--overlay", "latency"])
