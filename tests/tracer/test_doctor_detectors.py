"""Doctor detectors fire exactly on their cause: each has a test that it fires and a near miss that does not.

FlashAttention 4 and CUDA graphs are checked on CPU with stand-ins (a package at FA4's import path,
`flash_attn/cute/interface.py`, written here; a forward carrying make_graphed_callables' names): CPU
stand-in only, GPU not run.
"""
from __future__ import annotations

import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2
from tracer.compat.doctor import doctor
from tracer.compat.rows import GRAPHED_FORWARD
from tracer.replay.interpreter import dependence_declared_absent

STAND_IN = '''
"""A CPU stand-in with FlashAttention 4's interface names (flash_attn.cute.interface): reference math only."""
import torch


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, softmax_scale=None, causal=False, window_size=(None, None), learnable_sink=None,
                softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, mask_mod=None, full_block_cnt=None,
                full_block_idx=None, mask_block_cnt=None, mask_block_idx=None, block_size=None, return_lse=False):
        scale = softmax_scale or q.shape[-1] ** -0.5
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
        if causal:
            n, m = scores.shape[-2:]
            scores = scores.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)
        return out, lse


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_lse=False):
    return FlashAttnFunc.apply(q, k, v, softmax_scale, causal, (None, None), None, 0.0, 1, None, False, None,
                               None, None, None, None, None, return_lse)
'''


def write_package(root, name: str, interface: bool = True):
    pkg = root / name
    (pkg / "cute").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cute" / "__init__.py").write_text("")
    if interface:
        (pkg / "cute" / "interface.py").write_text(textwrap.dedent(STAND_IN))
    return pkg


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """Prepend tmp_path to sys.path; drop any module imported from it afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("flash_attn", "near_flash"):
            del sys.modules[name]


class Attention(nn.Module):
    def __init__(self, interface):
        super().__init__()
        self.interface = interface
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (proj(x).view(b, s, 2, 8) for proj in (self.q, self.k, self.v))
        out, lse = self.interface.flash_attn_func(q, k, v, causal=True, return_lse=True)
        return out.flatten(2), lse


def traced(model):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracer.trace(model.eval(), (torch.randn(1, 5, 16),))


# -- FlashAttention 4 ---------------------------------------------------------------------------------------
def test_fa4_interface_is_detected_from_the_search_path_without_importing_it(on_path):
    from tracer.compat.flash4 import has_flash_attention_4_interface

    assert not has_flash_attention_4_interface()
    model = tiny_gpt2()
    write_package(on_path, "flash_attn")
    before = set(sys.modules)
    report = doctor(model)
    assert not [m for m in set(sys.modules) - before if m.startswith("flash_attn")], "detection imported flash_attn"
    row = report.row("attention.flash_attention_4")
    assert row.applies and "cute/interface.py" in row.detail and has_flash_attention_4_interface()
    assert "distributions: none recorded" in row.detail  # the stand-in is a bare folder, no installed metadata
    assert "CPU stand-in only; GPU not run" in row.evidence


def test_fa4_near_misses_do_not_fire(on_path):
    write_package(on_path, "flash_attn", interface=False)  # a flash_attn package without the cute interface (FA2)
    write_package(on_path, "near_flash")  # the interface file under another package name
    model = tiny_gpt2()
    model.config._attn_implementation = "flash_attention_2"
    report = doctor(model)
    assert report.row("attention.flash_attention").applies
    assert not report.row("attention.flash_attention_4").applies
    model.config._attn_implementation = "flash_attention_4"  # configured for FA4 with no interface: it applies
    assert "not on the search path" in doctor(model).row("attention.flash_attention_4").detail


def test_fa4_function_is_a_boundary_op_whose_lse_is_excused_from_v_only(on_path):
    write_package(on_path, "flash_attn")
    import flash_attn.cute.interface as fa4

    t = traced(Attention(fa4))
    ops = [op for op in t.ops if op.func == "flash_attn.cute.interface.FlashAttnFunc"]
    assert sorted(op.output_index for op in ops) == [0, 1]
    report = tracer.validate(t)
    assert report, report.to_dict()["findings"]
    out, lse = sorted(ops, key=lambda op: op.output_index)
    assert [p for p in ("0", "1", "2") if dependence_declared_absent(lse, p)] == ["2"]  # lse never reads v
    assert not any(dependence_declared_absent(out, p) for p in ("0", "1", "2"))


def test_the_same_function_at_another_import_path_gets_no_declaration(on_path):
    write_package(on_path, "near_flash")
    import near_flash.cute.interface as near

    t = traced(Attention(near))
    report = tracer.validate(t)
    lse = next(op.label for op in t.ops if op.func.endswith("FlashAttnFunc") and op.output_index == 1)
    assert not report and [(f["label"], f["check"]) for f in report.to_dict()["findings"]] == [(lse, "edge")]


# -- CUDA graphs ----------------------------------------------------------------------------------------------
def graphed_stand_in(module):
    """What make_graphed_callables leaves on a module: an instance `forward` with its names (CPU stand-in)."""
    original = module.forward

    def new_fwd(*args, **kwargs):
        return original(*args, **kwargs)

    new_fwd.__module__, new_fwd.__qualname__ = GRAPHED_FORWARD
    module.forward = new_fwd
    return module


def test_cuda_graphs_fires_on_a_forward_installed_by_make_graphed_callables():
    model = nn.Sequential(nn.Linear(4, 4), graphed_stand_in(nn.Linear(4, 4)))
    row = doctor(model).row("cuda.graphs")
    assert row.applies and "make_graphed_callables forward on 1" in row.detail


def test_cuda_graphs_near_misses_do_not_fire():
    wrapped = nn.Linear(4, 4)
    original = wrapped.forward

    def new_fwd(*args):  # same function name, the user's own module
        return original(*args)

    wrapped.forward = new_fwd
    assert not doctor(nn.Sequential(wrapped)).row("cuda.graphs").applies
    with torch.device("meta"):
        on_device = nn.Linear(4, 4)  # where a model lives says nothing about graphs
    assert not doctor(on_device).row("cuda.graphs").applies


# -- serving engines ------------------------------------------------------------------------------------------
def foreign_class(module: str):
    return type("ParallelLMHead", (nn.Linear,), {"__module__": module})


def test_serving_fires_on_a_vllm_or_sglang_submodule():
    for package in ("vllm.model_executor.layers.vocab_parallel_embedding", "sglang.srt.layers.linear"):
        model = tiny_gpt2()
        model.lm_head = foreign_class(package)(32, 100)
        row = doctor(model).row("serving.engines")
        assert row.applies and row.detail == f"lm_head: {package}"


def test_serving_near_misses_do_not_fire():
    for package in ("myvllm.layers", "mypkg.vllm.layers", "sglang_tools.layers"):
        model = tiny_gpt2()
        model.lm_head = foreign_class(package)(32, 100)
        assert not doctor(model).row("serving.engines").applies, package


# -- GPTQ / AWQ -----------------------------------------------------------------------------------------------
def test_gptq_awq_fires_on_quant_method_or_a_gptq_awq_package_only():
    model = tiny_gpt2()
    model.transformer.h[0].mlp.c_fc = foreign_class("auto_gptq.nn_modules.qlinear.qlinear_cuda")(32, 128)
    assert doctor(model).row("quant.gptq_awq").detail == "quant_method=gptq"
    awq = tiny_gpt2()
    awq.config.quantization_config = {"quant_method": "awq"}
    assert doctor(awq).row("quant.gptq_awq").applies


def test_gptq_awq_near_misses_do_not_fire():
    model = tiny_gpt2()
    model.lm_head = foreign_class("optimum.bettertransformer.models.base")(32, 100)  # optimum, not GPTQ
    assert not doctor(model).row("quant.gptq_awq").applies
    bnb = tiny_gpt2()
    bnb.config.quantization_config = {"quant_method": "bitsandbytes"}
    assert not doctor(bnb).row("quant.gptq_awq").applies
    own = tiny_gpt2()
    own.lm_head = foreign_class("gptq.layers")(32, 100)  # a user's own module named gptq: no GPTQ package
    assert not doctor(own).row("quant.gptq_awq").applies
