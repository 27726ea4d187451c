"""Parity sweep: the C kernel and the Python reference kernel capture the same trace of zoo samples.

Each sample is built as the zoo builds it (`tests.zoo.hf`: the config class's defaults shrunken, random
weights) and captured twice in one process, once per kernel (`tracer.capture.kernel.use_kernel`), in both
save modes; the traces must agree in every op field (label, kind, callable, parents, shapes and dtypes,
module stack, parameters, source site), every module scope and call, every parameter record and every
saved value. CI-sized: four small models.
"""
from __future__ import annotations

import pytest

import tracer
from tests.tracer.test_hotpath import _canonical, _same_values
from tracer.capture import kernel
from tracer.capture.kernel import native

pytestmark = pytest.mark.skipif(not native.ACTIVE, reason="the C kernel is not active in this process")

SAMPLES = {  # zoo model type -> the class captured
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "bert": "BertForMaskedLM",
    "resnet": "ResNetForImageClassification",  # a conv net (convolutions, batch norm, pooling)
}


@pytest.fixture(scope="module")
def samples() -> dict:
    from tests.zoo.hf import build, make_inputs, tiny_config

    made = {}
    for model_type, class_name in SAMPLES.items():
        config = tiny_config(model_type)
        model = build(class_name, config)
        made[model_type] = (model, make_inputs(model, config))
    return made


@pytest.mark.parametrize("save", ["all", "none"])
@pytest.mark.parametrize("model_type", list(SAMPLES))
def test_both_kernels_capture_the_same_trace_of_a_zoo_sample(samples, model_type, save):
    model, inputs = samples[model_type]
    options = tracer.CaptureOptions(save=save)

    def capture(name: str) -> tracer.Trace:
        with kernel.use_kernel(name):
            assert kernel.current() == name
            return tracer.trace(model, (), input_kwargs=inputs, capture=options)

    with_c, with_python = capture("c"), capture("python")
    assert len(with_c.ops) > 20
    assert sum(op.source is not None for op in with_c.ops) > len(with_c.ops) // 2  # sources recorded, and compared
    assert _canonical(with_c) == _canonical(with_python)
    assert [(op.label, op.out) for op in with_c.ops] == [(op.label, op.out) for op in with_python.ops]  # shapes
    assert _same_values(with_c, with_python)
    assert bool(with_c.values) == (save == "all")
