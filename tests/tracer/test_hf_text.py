"""Raw text to a weights-free trace through a local tokenizer (built here with `tokenizers`)."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_llama
from tracer import CaptureOptions, errors
from tracer.bridges.transformers import trace_ids, trace_text

WORDS = ["[UNK]", "[PAD]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A word-level tokenizer saved to a local folder, loaded back by path (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path_factory.mktemp("tok")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(str(folder))
    return folder


def meta_twin(real):
    with torch.device("meta"):
        twin = type(real)(real.config)
    return twin.eval()


def test_eager_text_route_traces_on_meta_and_discharges_corroborated(tokenizer_dir):
    real = tiny_llama(attn="eager")
    st = trace_text(meta_twin(real), TEXT, tokenizer=tokenizer_dir)
    assert st.structure_only and st.values == {}
    assert {op.io_path: (op.out.shape, op.out.device) for op in st.inputs} == {
        "kwargs.input_ids": ((1, 6), "meta"), "kwargs.attention_mask": ((1, 6), "meta")}
    assert st.envelope.input_plan["attention_mask"].startswith("all_ones")
    assert st.envelope.history[-1]["event"] == "mask_declared_all_ones"
    rt = trace_text(real, TEXT, tokenizer=tokenizer_dir)
    assert rt.provenance["twin"]["attention_mask"] == "all_ones"
    result = st.discharge_against(rt)
    assert result.state == "CORROBORATED" and len(st) == len(rt)


def test_sdpa_text_route_refuses_with_the_backend_remedy(tokenizer_dir):
    meta = meta_twin(tiny_llama(attn="sdpa"))
    with pytest.raises(errors.ValueDependentBranchError) as info:
        trace_text(meta, TEXT, tokenizer=tokenizer_dir)
    assert info.value.findings["attn_implementation"] == "sdpa"
    assert "attn_implementation='eager'" in info.value.remedy and "masking_utils" in info.value.site
    assert torch._C._len_torch_function_stack() == 0


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_ids_only_route_works_on_every_backend(attn):
    real = tiny_llama(attn=attn)
    st = trace_ids(meta_twin(real), (1, 6))
    rt = tracer.trace(real, (torch.randint(0, 100, (1, 6)),))
    assert st.discharge_against(rt).state == "CORROBORATED"


def test_padded_prompts_refuse(tokenizer_dir):
    meta = meta_twin(tiny_llama(attn="eager"))
    with pytest.raises(errors.PaddedPromptError) as info:
        trace_text(meta, ["the cat", "the cat sat"], tokenizer=tokenizer_dir)
    assert info.value.code == "padded_prompt_unsupported" and info.value.findings["lengths"] == [2, 3]
    from tracer.bridges.transformers import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    with pytest.raises(errors.PaddedPromptError) as info:
        trace_text(meta, TEXT, tokenizer=lambda text: tok(text, padding="max_length", max_length=10))
    assert info.value.findings["padded_positions"] == [6, 7, 8, 9]


def test_equal_length_prompts_batch(tokenizer_dir):
    st = trace_text(meta_twin(tiny_llama(attn="eager")), ["the cat sat", "a dog ran"], tokenizer=tokenizer_dir)
    assert st.inputs[0].out.shape == (2, 3)


# -- issue 38: raw text through tracer.trace, and trace_text honouring every CaptureOptions field --------------
def test_tracer_trace_takes_text_with_a_tokenizer_and_discharges_corroborated(tokenizer_dir):
    real = tiny_llama(attn="eager")
    st = tracer.trace(meta_twin(real), TEXT, tokenizer=tokenizer_dir, capture=CaptureOptions(structure_only=True))
    assert st.structure_only and st.ladder_state == "HYPOTHESIS" and st.values == {}
    assert {op.io_path: (op.out.shape, op.out.device) for op in st.inputs} == {
        "kwargs.input_ids": ((1, 6), "meta"), "kwargs.attention_mask": ((1, 6), "meta")}
    assert st.envelope.input_plan["attention_mask"].startswith("all_ones")
    assert st.provenance["text_route"] == {"prompts": 1, "tokens": 6, "mask": "all_ones"}
    rt = tracer.trace(real, TEXT, tokenizer=tokenizer_dir)
    assert rt.ladder_state == "OBSERVED" and rt.values
    assert st.discharge_against(rt).state == "CORROBORATED"


def test_text_capture_options_reach_the_capture_not_the_forward(tokenizer_dir):
    real = tiny_llama(attn="eager")
    none_saved = trace_text(real, TEXT, tokenizer=tokenizer_dir, capture=CaptureOptions(save="none"))
    assert none_saved.values == {} and none_saved.provenance["options"]["save"] == "none"
    assert {op.io_path for op in none_saved.inputs} == {"kwargs.input_ids", "kwargs.attention_mask"}  # no `capture` input
    linears = trace_text(real, TEXT, tokenizer=tokenizer_dir, capture=CaptureOptions(save=lambda op: op.kind == "linear"))
    assert linears.values and all(linears[label].kind == "linear" for label in linears.values)
    with_backward = trace_text(real, TEXT, tokenizer=tokenizer_dir, capture=CaptureOptions(backward=True, save_grads="none"))
    assert with_backward.backward is not None
    unsourced = tracer.trace(real, TEXT, tokenizer=tokenizer_dir, capture=CaptureOptions(record_source=False))
    assert all(op.source is None for op in unsourced.ops)


def test_text_structure_only_on_a_real_model_refuses_and_meta_needs_the_flag(tokenizer_dir):
    real = tiny_llama(attn="eager")
    with pytest.raises(errors.RealStateWithStructureOnlyError):
        trace_text(real, TEXT, tokenizer=tokenizer_dir, capture=CaptureOptions(structure_only=True))
    with pytest.raises(errors.MetaStateWithoutFlagError):  # as tracer.trace on meta ids without the flag
        tracer.trace(meta_twin(real), TEXT, tokenizer=tokenizer_dir)
    assert torch._C._len_torch_function_stack() == 0


def test_text_simulated_device_option_is_kept(tokenizer_dir):
    st = trace_text(meta_twin(tiny_llama(attn="eager")), TEXT, tokenizer=tokenizer_dir,
                    capture=CaptureOptions(structure_only=True, simulate_device=None))
    assert st.envelope.twin["simulated_device"] is None
    assert trace_text(meta_twin(tiny_llama(attn="eager")), TEXT, tokenizer=tokenizer_dir).envelope.twin[
        "simulated_device"] == "cpu"


def test_text_refusals_are_typed(tokenizer_dir):
    meta = meta_twin(tiny_llama(attn="eager"))
    structure = CaptureOptions(structure_only=True)
    with pytest.raises(errors.PaddedPromptError):
        tracer.trace(meta, ["the cat", "the cat sat"], tokenizer=tokenizer_dir, capture=structure)
    with pytest.raises(errors.TokenizerNotFoundError) as info:
        tracer.trace(meta, TEXT, capture=structure)
    assert "tokenizer=" in info.value.remedy
    with pytest.raises(errors.InvalidInputError):
        tracer.trace(meta, TEXT, {"attention_mask": torch.ones(1, 6)}, tokenizer=tokenizer_dir, capture=structure)
    with pytest.raises(errors.InvalidInputError):
        tracer.trace(meta, ["the cat", 3], tokenizer=tokenizer_dir, capture=structure)
    with pytest.raises(errors.InvalidInputError):
        trace_text(meta, TEXT, tokenizer=tokenizer_dir, capture="structure_only")
