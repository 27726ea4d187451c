"""The zoo's config shrink (tests/zoo/shrink.py) on real transformers default configs: the rules that
keep a shrunken config self-consistent. Configs only; no model is built."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from transformers import AutoConfig  # noqa: E402

from tests.zoo.shrink import _split_like, shrink_config  # noqa: E402


def tiny(model_type: str):
    return shrink_config(AutoConfig.for_model(model_type))


def test_rotary_dim_fits_in_the_head():
    config = tiny("gptj")
    assert config.rotary_dim <= config.n_embd // config.n_head


def test_swin_stage_lists_follow_the_stage_count_and_the_final_width_is_rederived():
    config = tiny("swin")
    assert len(config.depths) == len(config.num_heads) == config.num_layers
    assert config.hidden_size == config.embed_dim * 2 ** (config.num_layers - 1)
    assert all(config.embed_dim * 2 ** i % h == 0 for i, h in enumerate(config.num_heads))


def test_kv_heads_equal_to_heads_by_default_stay_equal():
    config = tiny("esmc")
    assert config.num_key_value_heads == config.num_attention_heads < 40


def test_attribute_a_default_sub_config_lacks_is_borrowed_from_its_parent():
    assert AutoConfig.for_model("dbrx").attn_config.__dict__.get("rope_theta") is None
    assert tiny("dbrx").attn_config.rope_theta == 10000.0


def test_mrope_sections_sum_to_half_the_rotated_head():
    config = tiny("glm4v_moe_text")
    rope = config.rope_parameters
    head_dim = config.hidden_size // config.num_attention_heads
    assert sum(rope["mrope_section"]) == int(head_dim * rope["partial_rotary_factor"]) // 2


def test_split_like_keeps_parts_equal_by_default_equal():
    assert _split_like(4, [22, 22, 20]) == [1, 1, 2]
    assert sum(_split_like(7, [16, 24, 24])) == 7
    assert _split_like(3, [0, 0, 0]) == [1, 1, 1]


def test_width_valued_fields_follow_the_width():
    mimi = tiny("mimi")
    assert mimi.upsample_groups == mimi.hidden_size == 32
    wavtokenizer = tiny("wavtokenizer")
    assert wavtokenizer.codebook_dim == wavtokenizer.hidden_size


def test_timm_backbone_is_replaced_by_the_transformers_family_with_the_same_stages():
    config = tiny("detr")
    assert config.backbone_config.model_type == "resnet"
    assert config.backbone_config.out_features == ["stage1", "stage2", "stage3", "stage4"]


def test_layout_width_splits_into_six_box_embeddings():
    config = tiny("layoutlmv3")
    assert 4 * config.coordinate_size + 2 * config.shape_size == config.hidden_size
    assert config.hidden_size % config.num_attention_heads == 0


def test_group_norm_groups_divide_the_shrunken_channels():
    config = tiny("bit")
    mids = [c // 4 for c in config.hidden_sizes]  # BiT's bottleneck: a quarter of the stage width
    assert all(c % config.num_groups == 0 for c in mids + [config.embedding_size])


def test_sub_config_widths_follow_their_sibling():
    config = tiny("sam")
    assert config.vision_config.output_channels == config.mask_decoder_config.hidden_size
    assert config.vision_config.num_pos_feats == config.mask_decoder_config.hidden_size // 2
    assert config.prompt_encoder_config.image_embedding_size == config.vision_config.image_size // 16


def test_backbone_feature_sizes_are_the_same_multiples_of_the_patch_grid():
    config = tiny("sam3_tracker").vision_config
    grid = config.backbone_config.image_size // config.backbone_config.patch_size
    assert config.backbone_feature_sizes == [[4 * grid] * 2, [2 * grid] * 2, [grid] * 2]


def test_derived_cross_projection_is_rederived_from_the_shrunken_widths():
    config = tiny("blt")
    expected = config.encoder_config.hidden_size * config.cross_attn_k
    assert config.global_config.encoder_cross_output_size == (
        expected if expected != config.global_config.hidden_size else None)
    assert config.decoder_config.hidden_size_global == config.global_config.hidden_size


def test_borrowing_is_limited_to_attributes_the_modeling_code_reads():
    assert "dropout_rate" not in vars(tiny("llama"))
    assert tiny("t5gemma2_encoder").text_config.dropout_rate == 0.0


def test_axial_position_parts_sum_to_the_width():
    config = tiny("reformer")
    assert sum(config.axial_pos_embds_dim) == config.hidden_size


def test_mobilenet_channels_shrink_through_the_depth_multiplier():
    config = tiny("mobilenet_v2")  # 2.2M parameters at 1.0, 238k at 0.25
    assert config.depth_multiplier == 0.25 and config.min_depth == 8


def test_dpt_keeps_one_layer_per_kept_feature():
    config = tiny("dpt")  # its neck takes one hidden state per neck width, picked by layer index
    assert list(config.backbone_out_indices) == list(range(len(config.neck_hidden_sizes)))
    assert config.num_hidden_layers >= len(config.neck_hidden_sizes)


def test_emu3_and_chameleon_get_the_special_tokens_their_constructors_read():
    emu3, chameleon = tiny("emu3"), tiny("chameleon")
    vocab = emu3.text_config.vocab_size
    assert emu3.vocabulary_map["<image>"] == vocab - 1 and emu3.vocabulary_map["<|extra_200|>"] == vocab - 2
    assert all(v < vocab for v in emu3.vocabulary_map.values())
    assert any(name.startswith("IMGIMG") for name in chameleon.vocabulary_map)


def test_a_per_layer_kv_head_count_is_read_without_the_global_access_that_raises():
    text = vars(tiny("embedding_gemma2").text_config)  # reading num_key_value_heads globally raises on it
    assert text["num_attention_heads"] <= 4 and text["num_key_value_heads"] <= text["num_attention_heads"]


def test_qwen4_exp_indexed_attention_gets_a_complete_token_indexer():
    config = tiny("qwen4_exp_text")
    assert config.indexer_kv_heads == 1 and config.indexer_budget % config.indexer_compress_ratio == 0
