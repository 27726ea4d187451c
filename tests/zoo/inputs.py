"""Candidate inputs for one transformers model, from its own forward signature and config.

`candidates` yields input dicts from the most plain to the least; the sweep keeps the first on
which the plain forward runs. Sizes come from the config (image size and channels, patch and
window sizes, frames, mel bins, source positions, context length); nothing is per family.
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Iterator

import torch

from .inputs_fill import complete, ints, mel_bins, patch_layouts, required, wants_patches
from .inputs_fill import attr as _attr, sub as _sub  # one reader of config fields for both modules

SEQ = 8
IMAGE = 32
AUDIO = (1600, 16000, 3840)


def image_sizes(vision: Any) -> list[int]:
    """Square sizes to try: the config's own, then multiples of its patch (and window) grid."""
    own = _attr(vision, "image_size", "img_size", "input_size") or IMAGE
    patch = _attr(vision, "patch_size", "patch_sizes") or 1
    window = _attr(vision, "window_size") or 1
    stages = len(ints(getattr(vision, "depths", None))) or 1
    grid = patch * window * 2 ** max(stages - 1, 0)
    sizes = [own, max(own, 2 * patch), grid * max(1, -(-own // grid)), 64, 128, 224]
    return list(dict.fromkeys(s for s in sizes if s > 0))


def _hw(vision: Any, size: int) -> tuple[int, int]:
    """(size, size), or the config's own (height, width) when it is not square and `size` is its height."""
    own = ints(getattr(vision, "image_size", None))
    return (own[0], own[1]) if len(own) == 2 and own[0] == size else (size, size)


def _channels(vision: Any) -> int:
    return _attr(vision, "num_channels", "in_channels", "input_channels", "in_chans") or 3


def pixels(vision: Any, size: int, gen: torch.Generator) -> torch.Tensor:
    """(1, C, H, W), or (1, frames, C, H, W) for a config with `num_frames`."""
    frames = _attr(vision, "num_frames", "frames")
    h, w = _hw(vision, size)
    shape = (1, frames, _channels(vision), h, w) if frames else (1, _channels(vision), h, w)
    return torch.randn(*shape, generator=gen)


def audio_lengths(config: Any) -> list[int]:
    """Waveform lengths to try: four hops of a codec's downsampling first (samples per token, hop
    length or the product of its ratios), then AUDIO."""
    hop = _attr(config, "samples_per_token", "hop_length")
    ratios = ints(getattr(config, "downsampling_ratios", None))
    hop = hop or (math.prod(ratios) if ratios else None)
    return list(dict.fromkeys(([4 * hop] if hop and hop > 1 else []) + list(AUDIO)))


def features(config: Any, gen: torch.Generator) -> list[torch.Tensor]:
    """Log-mel inputs to try: (1, bins, T) for T from the source positions, then (1, T, bins)."""
    bins, positions = mel_bins(config), _attr(_sub(config, "audio_config"), "max_source_positions")
    lengths = [2 * positions] if positions else []
    lengths += [64, 128, 3000]
    out = [torch.randn(1, bins, t, generator=gen) for t in dict.fromkeys(lengths)]
    return out + [torch.randn(1, t, bins, generator=gen) for t in sorted(set(lengths))]


def _vocab(config: Any) -> int:
    text = _sub(config, "text_config")
    return max(4, min(int(getattr(text, "vocab_size", None) or 100), 100))


def main_name(model: torch.nn.Module, params: Any) -> str:
    """The model's main input, when its forward takes it; else the first required parameter."""
    name = getattr(model, "main_input_name", "input_ids")
    name = name[0] if isinstance(name, (list, tuple)) else name
    if name in params:
        return name
    need = required(params)
    return need[0] if need else ("input_ids" if "input_ids" in params else name)


def videos(vision: Any, size: int, gen: torch.Generator) -> torch.Tensor:
    """(1, frames, C, H, W), frames from the config (or two tubelets)."""
    frames = _attr(vision, "num_frames", "frames_per_clip", "frames") or 2 * (_attr(vision, "tubelet_size") or 2)
    return torch.randn(1, frames, _channels(vision), size, size, generator=gen)


def modality(name: str, config: Any, gen: torch.Generator) -> torch.Tensor | None:
    """The first-size tensor for a modality input named `name` (None: not a modality input)."""
    vision = _sub(config, "vision_config")
    if name == "pixel_values":
        return pixels(vision, image_sizes(vision)[0], gen)
    if name == "pixel_values_videos":
        return videos(vision, image_sizes(vision)[0], gen)
    if name == "input_values":
        return torch.randn(1, audio_lengths(config)[0], generator=gen)
    if name == "input_features":
        return features(config, gen)[0]
    if name == "audio_mel":
        return torch.randn(1, 64, mel_bins(config), generator=gen)  # (1, T, bins)
    if name in ("input_ids", "task_inputs"):
        length = _attr(config, "task_seq_len") if name == "task_inputs" else None
        return torch.randint(3, _vocab(config), (1, length or SEQ), generator=gen)
    return None


def base(model: torch.nn.Module, config: Any, gen: torch.Generator) -> dict[str, Any]:
    """The main input and every required modality input, on the config's first sizes."""
    params = inspect.signature(model.forward).parameters
    name = main_name(model, params)
    inputs: dict[str, Any] = {}
    dual = {"input_ids", "pixel_values"} <= set(params) and not _has_image_tokens(config)
    both = ["pixel_values", "input_ids"] if dual else []
    if "return_loss" in params:  # a contrastive model: every modality it names
        both += [k for k in ("input_ids", "input_features", "pixel_values_videos") if k in params]
    for key in dict.fromkeys([name, *required(params), *both]):
        value = modality(key, config, gen)
        if value is not None:
            inputs[key] = value
    if "bbox" in params:
        inputs["bbox"] = torch.sort(torch.randint(0, 1000, (1, SEQ, 4), generator=gen), dim=-1).values
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        inputs["decoder_input_ids"] = torch.randint(3, _vocab(config), (1, SEQ // 2), generator=gen)
    inputs.update(time_series(config, params, gen))
    return inputs


def time_series(config: Any, params: Any, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """past_values (and time features, observed mask) sized from the config's context length and lags."""
    if "past_values" not in params:
        return {}
    context = _attr(config, "context_length", "context_points") or 16
    channels = _attr(config, "input_size", "num_input_channels") or 1
    lags = max(ints(getattr(config, "lags_sequence", None)) or [0])
    length = context + lags
    shape = (1, length, channels) if channels > 1 or "num_input_channels" in vars(config) else (1, length)
    out = {"past_values": torch.randn(*shape, generator=gen)}
    feats = _attr(config, "num_time_features")
    if "past_time_features" in params and feats is not None:
        out["past_time_features"] = torch.randn(1, length, feats, generator=gen)
    if "past_observed_mask" in params and "past_time_features" in out:
        out["past_observed_mask"] = torch.ones(shape)
    if "past_values_padding" in params:  # TimesFM's base model: which steps are padding (none), per step
        out["past_values_padding"] = torch.zeros(shape[:2], dtype=torch.long)
    if "freq" in params:  # and the series' frequency class, one per sample
        out["freq"] = torch.zeros(1, 1, dtype=torch.long)
    return out


def candidates(model: torch.nn.Module, config: Any) -> Iterator[dict[str, Any]]:
    """Input dicts to try in order, each with its companions (tests.zoo.inputs_fill.complete)."""
    gen = torch.Generator().manual_seed(1)
    params = inspect.signature(model.forward).parameters
    for inputs in _variants(model, config, params, gen):
        yield complete(config, params, inputs, gen)


def _variants(model: torch.nn.Module, config: Any, params: Any, gen: torch.Generator) -> Iterator[dict[str, Any]]:
    """The base, then without a cache, then other sizes and layouts; patch layouts for patch-sequence encoders."""
    if wants_patches(params):
        others = {k: v for k, v in base(model, config, gen).items() if k in required(params)}
        for layout in patch_layouts(_sub(config, "vision_config"), params, gen):
            yield {**{k: v for k, v in others.items() if k != "pixel_values"}, **layout}
        return
    first = base(model, config, gen)
    yield first
    extra = {"use_cache": False} if "use_cache" in params else {}
    if extra:
        yield {**first, **extra}
    codebooks = _attr(getattr(model, "config", config), "num_codebooks")  # the decoder's, in a composite config
    if codebooks and isinstance(first.get("input_ids"), torch.Tensor) and first["input_ids"].dim() == 2:
        ids = first["input_ids"]  # a codebook decoder (MusicGen) reads one row of ids per codebook
        yield {**first, "input_ids": ids.repeat(codebooks, 1), **extra,
               **({"attention_mask": torch.ones_like(ids)} if "attention_mask" in first else {})}
    if "hidden_states" in required(params) and "hidden_states" not in first:
        yield from _hidden_states(model, config, first, gen)
    vision = _sub(config, "vision_config")
    for key, make in (("pixel_values", pixels), ("pixel_values_videos", videos)):
        if key in first:
            for size in image_sizes(vision)[1:]:
                yield {**first, key: make(vision, size, gen), **extra}
    if "pixel_values" in first and first["pixel_values"].dim() == 4:
        for count in (2, 1):  # an image pair (keypoint matchers), a one-image list per sample
            yield {**first, "pixel_values": first["pixel_values"][:, None].repeat(1, count, 1, 1, 1), **extra}
    if "input_values" in first:
        lengths = audio_lengths(config)
        for length in lengths[1:]:
            yield {**first, "input_values": torch.randn(1, length, generator=gen), **extra}
        for length in lengths:
            yield {**first, "input_values": torch.randn(1, 1, length, generator=gen), **extra}
        bins, frames = _attr(config, "num_mel_bins", "feature_size"), _attr(config, "max_length") or 64
        if bins:  # a spectrogram given as input_values: (1, frames, bins)
            yield {**first, "input_values": torch.randn(1, frames, bins, generator=gen), **extra}
        width = _attr(config, "hidden_size", "d_model")
        if width and "decoder_input_values" in params:  # an encoder-decoder without pre-nets: hidden states both sides
            yield {**first, "input_values": torch.randn(1, 4 * SEQ, width, generator=gen),
                   "decoder_input_values": torch.randn(1, SEQ, width, generator=gen), **extra}
    if "input_features" in first:
        for feats in features(config, gen)[1:]:
            yield {**first, "input_features": feats, **extra}
        # a one-channel spectrogram image: (1, 1, T, bins)
        yield {**first, "input_features": torch.randn(1, 1, 64, mel_bins(config), generator=gen), **extra}
        stacked = _attr(_sub(config, "audio_config"), "input_size")
        if stacked and stacked != mel_bins(config):  # frames stacked after the mel (LFR): (1, T, input_size)
            yield {**first, "input_features": torch.randn(1, 4 * SEQ, stacked, generator=gen), **extra}


def _hidden_states(model: torch.nn.Module, config: Any, first: dict[str, Any],
                   gen: torch.Generator) -> Iterator[dict[str, Any]]:
    """A bare encoder or decoder stage that takes `hidden_states`: a (1, 1, L) waveform when the model
    declares audio as its main input, then (1, width, T) and (1, T, width) sequences."""
    width = _attr(config, "hidden_size", "d_model", "embed_dim") or 32
    if getattr(model, "main_input_name", None) == "input_values":
        yield {**first, "hidden_states": torch.randn(1, 1, audio_lengths(config)[0], generator=gen)}
    yield {**first, "hidden_states": torch.randn(1, width, 4 * SEQ, generator=gen)}
    yield {**first, "hidden_states": torch.randn(1, 4 * SEQ, width, generator=gen)}


def _has_image_tokens(config: Any) -> bool:
    """True for models that splice image features at image-token positions (they need matched prompts)."""
    return any(getattr(config, k, None) is not None for k in ("image_token_id", "image_token_index"))
