"""Edge routing on real graphs: no edge crosses a box or a frame header it does not connect, skip
connections bend out beside the block they skip, fans share one trunk, labels fit their boxes."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tracer
from exporters.layout import LayoutEngine, compute_layout, default_expansion
from exporters.layout.checks import edge_crossings, label_overflows
from tests.exporters.test_layout_checks import check_layout
from tests.models import tiny_gpt2, tiny_llama, tiny_resnet

IDS = torch.tensor([[1, 2, 3, 4, 5]])
OPTS = tracer.CaptureOptions(save="none")


def _below(engine: LayoutEngine, address: str) -> set[str]:
    return {a for a in engine.tree.addresses() if a == address or a.startswith(address + ".")}


@pytest.fixture(scope="module")
def graphs():
    return {
        "gpt2": tracer.trace(tiny_gpt2(2), (IDS,), capture=OPTS),
        "llama": tracer.trace(tiny_llama(2), (IDS,), capture=OPTS),  # rotary embeddings fan into every layer
        "resnet": tracer.trace(tiny_resnet(), (torch.randn(1, 3, 16, 16),), capture=OPTS),
    }


@pytest.fixture(scope="module")
def llama_8b():
    """The Llama-3.1-8B config on the meta device (weights-free): the explorer's default graph."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      hidden_size=4096, intermediate_size=14336, max_position_embeddings=131072)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).eval()
    ids = torch.ones(1, 8, dtype=torch.long, device="meta")
    return tracer.trace(model, (ids,), capture=tracer.CaptureOptions(structure_only=True))


VIEWS = [
    ("gpt2", None), ("gpt2", "transformer.h.0"), ("gpt2", "*"),
    ("llama", None), ("llama", "model.layers.0"), ("llama", "*"),
    ("resnet", None), ("resnet", "encoder.stages.0"), ("resnet", "*"),
]


@pytest.mark.parametrize("name,opened", VIEWS)
def test_no_edge_crosses_a_box_or_header(graphs, name, opened):
    trace = graphs[name]
    engine = LayoutEngine(trace)
    expanded = engine.default_expansion()
    if opened == "*":
        expanded = engine.tree.addresses()
    elif opened:
        expanded |= _below(engine, opened)  # the module and everything inside it
    layout = engine.layout(expanded)
    check_layout(layout, trace)  # includes: no crossings, no label overflow
    assert edge_crossings(layout) == [] and label_overflows(layout) == []


def test_8b_default_and_one_open_layer_have_no_crossings(llama_8b):
    engine = LayoutEngine(llama_8b)
    for expanded in (engine.default_expansion(), engine.default_expansion() | _below(engine, "model.layers.3")):
        layout = engine.layout(expanded)
        assert edge_crossings(layout) == [], "an edge runs through a box"
        assert label_overflows(layout) == []
    # the rotary fan enters `layers` once: one trunk, not one line per layer
    layout = engine.layout(engine.default_expansion())
    frame = next(f for f in layout.frames if f.address == "model.layers")
    rotary = [e for e in layout.edges if e.source == "mod:model.rotary_emb"]
    assert len(rotary) == 32
    entries = {round(x, 3) for e in rotary for (x, y), (x2, y2) in zip(e.points, e.points[1:])
               if y < frame.y0 < y2 or y2 < frame.y0 < y}
    assert len(entries) == 1, f"the rotary fan crosses the top of `layers` at {len(entries)} places"


def test_residual_skip_bends_out_beside_the_block(graphs):
    trace = graphs["resnet"]
    engine = LayoutEngine(trace)
    layout = engine.layout(engine.default_expansion() | _below(engine, "encoder.stages.0"))
    add = next(n for n in layout.nodes if n.kind == "op" and n.label.startswith("add"))
    into_add = [e for e in layout.edges if e.target == add.id]
    assert len(into_add) == 2  # the block's output and the skip
    skip = max(into_add, key=lambda e: add.y - layout.node(e.source).y)  # the longer one skips the convs
    convs = [n for n in layout.nodes if n.label.startswith("conv2d") and n.module.startswith("encoder.stages.0")]
    assert convs
    # the skip runs beside the convolutions, clear of them on one side
    beside = [x for (x, y), (_, y2) in zip(skip.points, skip.points[1:])
              if min(y, y2) < convs[0].y < max(y, y2)]
    assert beside and all(abs(x - c.x) > c.width / 2 for x in beside for c in convs)


def test_one_off_calls_and_engines_agree(graphs):
    trace = graphs["llama"]
    engine = LayoutEngine(trace)
    exp = default_expansion(trace, engine) | {"model.layers.1"}
    assert compute_layout(trace, exp, engine=engine) == compute_layout(trace, exp) == engine.layout(exp)
    other = LayoutEngine(graphs["gpt2"])  # an engine made for another trace is not used
    assert compute_layout(trace, exp, engine=other) == engine.layout(exp)
    assert len(engine.cache) > 0 and not other.cache


SHIPPED = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "static" / "configs").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("config", SHIPPED)
def test_shipped_configs_default_and_one_open_block_pass_the_geometry_checks(config):
    """Every shipped config, weights-free: the default view and its first repeated block opened with
    everything inside (GPT-2, BERT-base and Qwen2.5-0.5B also fully expanded) have no crossings, no
    label overflows and pass every layout invariant."""
    from tracer.bridges.transformers import trace_config

    path = Path(__file__).resolve().parents[2] / "static" / "configs" / config
    trace = trace_config(str(path), input_shape=(1, 8))
    engine = LayoutEngine(trace)
    default = engine.default_expansion()
    blocks = sorted(a for a in engine.tree.addresses() if a.rsplit(".", 1)[-1] == "0" and engine.tree.parent_of.get(a) in default)
    assert blocks, "no repeated block to open"
    views = [default, default | _below(engine, blocks[0])]
    if config in ("gpt2.json", "bert-base.json", "qwen2.5-0.5b.json"):
        views.append(engine.tree.addresses())
    for expanded in views:
        layout = engine.layout(expanded)
        check_layout(layout, trace)
        assert edge_crossings(layout) == [] and label_overflows(layout) == []
