"""Raw text to a weights-free trace through a local tokenizer (built here with `tokenizers`)."""
from __future__ import annotations

import pytest
import torch

import tracer
from tests.models import tiny_llama
from tracer import errors
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
