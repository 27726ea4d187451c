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
