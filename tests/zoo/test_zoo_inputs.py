"""The sweep's inputs come from each model's signature and config; a re-sweep's rows merge by class."""
from __future__ import annotations

import pytest
import torch

from tests.zoo.hf import build, fitting_inputs, make_inputs, tiny_config
from tests.zoo.inputs import candidates, image_sizes
from tests.zoo.merge import merge


def test_image_sizes_start_at_the_config_and_cover_the_patch_and_window_grid():
    class Vision:
        image_size, patch_size, window_size, depths = 32, 4, 7, [1, 1, 1, 1]

    sizes = image_sizes(Vision())
    assert sizes[0] == 32 and any(s % (4 * 7 * 8) == 0 for s in sizes)


def test_a_video_config_gets_frames_and_a_spectrogram_gets_frames_by_bins():
    config = tiny_config("videomae")
    model = build("VideoMAEModel", config)
    assert make_inputs(model, config)["pixel_values"].shape[:2] == (1, config.num_frames)
    ast = tiny_config("audio-spectrogram-transformer")
    shapes = [c["input_values"].shape for c in candidates(build("ASTModel", ast), ast)]
    assert (1, ast.max_length, ast.num_mel_bins) in shapes


@pytest.mark.parametrize("model_type,cls", [("audio-spectrogram-transformer", "ASTModel"),
                                            ("deepseek_v3", "DeepseekV3Model")])
def test_the_plain_forward_runs_on_the_first_fitting_candidate(model_type, cls):
    """Both failed on the sweep's earlier inputs (AST: ids-shaped audio; DeepSeek: MLA head widths unshrunk)."""
    config, model, inputs, output = fitting_inputs(model_type, cls)
    assert isinstance(output.last_hidden_state, torch.Tensor) and output.last_hidden_state.shape[0] == 1


def test_merge_replaces_the_rerun_classes_and_records_the_rerun():
    results = {"conditions": {"workers": 2}, "transformers": [
        {"model_type": "a", "class": "AModel", "forward": {"result": "pass"}},
        {"model_type": "b", "class": "BModel", "forward": {"result": "unavailable"}}]}
    rerun = [{"model_type": "b", "class": "BModel", "forward": {"result": "pass"}},
             {"task": ["c", "CModel"], "error": "timed out after 120s"}]
    merged = merge(results, rerun, {"started_utc": "t0"})
    assert [r.get("class", r.get("task", [""])[-1]) for r in merged["transformers"]] == ["AModel", "BModel", "CModel"]
    assert merged["transformers"][1]["forward"]["result"] == "pass"
    assert merged["conditions"]["reruns"] == [{"started_utc": "t0", "architectures": 2, "classes": 2}]
    assert results["transformers"][1]["forward"]["result"] == "unavailable"  # the input is not changed


def _params(fn):
    import inspect

    return inspect.signature(fn).parameters


def test_a_patch_sequence_encoder_gets_flattened_patches_matching_its_grid():
    from tests.zoo.inputs_fill import patch_layouts

    class Vision:
        patch_size, temporal_patch_size, spatial_merge_size, in_channels = 14, 2, 2, 3

    def forward(hidden_states, grid_thw):
        ...

    layouts = list(patch_layouts(Vision(), _params(forward), torch.Generator().manual_seed(0)))
    first = layouts[0]
    assert first["grid_thw"].tolist() == [[1, 4, 4]]  # two merge units a side
    assert first["hidden_states"].shape == (16, 3 * 2 * 14 * 14)
    assert any(layout["hidden_states"].shape == (16, 3, 14, 14) for layout in layouts)


def test_spatial_shapes_and_patch_positions_come_with_a_batched_patch_sequence():
    from tests.zoo.inputs_fill import patch_layouts

    class Vision:
        patch_size, num_channels, pooling_kernel_size = 16, 3, 3

    def forward(pixel_values, pixel_position_ids, spatial_shapes, pixel_attention_mask):
        ...

    (only,) = patch_layouts(Vision(), _params(forward), torch.Generator().manual_seed(0))
    assert only["pixel_values"].shape == (1, 36, 3 * 16 * 16)
    assert only["spatial_shapes"].tolist() == [[6, 6]] and only["pixel_attention_mask"].shape == (1, 36)
    assert only["pixel_position_ids"].shape == (1, 36, 2) and only["pixel_position_ids"].max() == 5


def test_a_feature_mask_follows_the_frame_axis_of_either_layout():
    from tests.zoo.inputs_fill import complete

    class Config:
        num_mel_bins = 80

    def forward(input_features, input_features_mask=None):
        ...

    gen = torch.Generator().manual_seed(0)
    for feats in (torch.zeros(1, 80, 50), torch.zeros(1, 50, 80)):
        out = complete(Config(), _params(forward), {"input_features": feats}, gen)
        assert out["input_features_mask"].shape == (1, 50)


def test_codec_audio_lengths_start_at_four_hops():
    from tests.zoo.inputs import AUDIO, audio_lengths

    class Codec:
        downsampling_ratios = [2, 4, 5]

    class Plain:
        pass

    assert audio_lengths(Codec())[0] == 4 * 40 and audio_lengths(Plain()) == list(AUDIO)


def test_image_slots_mark_latent_query_num_positions_in_longer_ids():
    from tests.zoo.inputs_fill import image_slots

    class Config:
        latent_query_num = 5

    def forward(pixel_values, input_ids, image_embeds_position_mask=None):
        ...

    out = image_slots(Config(), _params(forward), {"input_ids": torch.arange(3, 11)[None]})
    assert out["input_ids"].shape == (1, 13) and out["image_embeds_position_mask"].sum() == 5
    assert out["image_embeds_position_mask"][0, 0] == 0  # the text's first token stays first


@pytest.mark.parametrize("model_type,cls", [("qwen2_5_vl_vision", "Qwen2_5_VisionTransformerPretrainedModel"),
                                            ("decision_transformer", "DecisionTransformerModel"),
                                            ("idefics3_vision", "Idefics3VisionTransformer")])
def test_required_inputs_named_by_the_signature_are_made(model_type, cls):
    """Each failed before with a missing positional argument or a None input (grid_thw, states, pixel_values)."""
    config, model, inputs, output = fitting_inputs(model_type, cls)
    assert output is not None and all(isinstance(v, torch.Tensor) for v in inputs.values())


def test_only_a_required_grid_makes_the_patch_path():
    """A full VLM names image_grid_thw optionally and keeps its text inputs."""
    from tests.zoo.inputs_fill import wants_patches

    def encoder(hidden_states, grid_thw):
        ...

    def vlm(input_ids=None, pixel_values=None, image_grid_thw=None):
        ...

    assert wants_patches(_params(encoder)) and not wants_patches(_params(vlm))
