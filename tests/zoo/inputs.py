"""Candidate inputs for one transformers model, from its own forward signature and config.

`candidates` yields input dicts from the most plain to the least; the sweep keeps the first on
which the plain forward runs. Sizes come from the config (image size and channels, patch and
window sizes, frames, mel bins, source positions, context length); nothing is per family.
"""
from __future__ import annotations

import inspect
from typing import Any, Iterator

import torch

SEQ = 8
IMAGE = 32
AUDIO = (1600, 16000, 3840)


def _sub(config: Any, name: str) -> Any:
    return getattr(config, name, None) or config


def _ints(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _attr(config: Any, *keys: str) -> int | None:
    for key in keys:
        try:
            found = _ints(getattr(config, key, None))
        except Exception:  # a per-layer attribute read globally
            found = []
        if found:
            return found[0]
    return None


def image_sizes(vision: Any) -> list[int]:
    """Square sizes to try: the config's own, then multiples of its patch (and window) grid."""
    own = _attr(vision, "image_size", "img_size", "input_size") or IMAGE
    patch = _attr(vision, "patch_size", "patch_sizes") or 1
    window = _attr(vision, "window_size") or 1
    stages = len(_ints(getattr(vision, "depths", None))) or 1
    grid = patch * window * 2 ** max(stages - 1, 0)
    sizes = [own, max(own, 2 * patch), grid * max(1, -(-own // grid)), 64, 128, 224]
    return list(dict.fromkeys(s for s in sizes if s > 0))


def _channels(vision: Any) -> int:
    return _attr(vision, "num_channels", "in_channels", "input_channels", "in_chans") or 3


def pixels(vision: Any, size: int, gen: torch.Generator) -> torch.Tensor:
    """(1, C, H, W), or (1, frames, C, H, W) for a config with `num_frames`."""
    frames = _attr(vision, "num_frames", "frames")
    shape = (1, frames, _channels(vision), size, size) if frames else (1, _channels(vision), size, size)
    return torch.randn(*shape, generator=gen)


def features(config: Any, gen: torch.Generator) -> list[torch.Tensor]:
    """Log-mel inputs to try: (1, bins, T) for T from the source positions, then (1, T, bins)."""
    audio = _sub(config, "audio_config")
    bins = _attr(audio, "num_mel_bins", "feature_size", "input_feat_size", "n_mels", "num_mel_filters") or 80
    positions = _attr(audio, "max_source_positions")
    lengths = [2 * positions] if positions else []
    lengths += [64, 128, 3000]
    out = [torch.randn(1, bins, t, generator=gen) for t in dict.fromkeys(lengths)]
    return out + [torch.randn(1, t, bins, generator=gen) for t in dict.fromkeys(lengths)]


def _vocab(config: Any) -> int:
    text = _sub(config, "text_config")
    return max(4, min(int(getattr(text, "vocab_size", None) or 100), 100))


def base(model: torch.nn.Module, config: Any, gen: torch.Generator) -> dict[str, Any]:
    """The signature's required tensors and the main input, on the config's first sizes."""
    params = inspect.signature(model.forward).parameters
    name = getattr(model, "main_input_name", "input_ids")
    vision = _sub(config, "vision_config")
    inputs: dict[str, Any] = {}
    dual = {"input_ids", "pixel_values"} <= set(params) and not _has_image_tokens(config)
    if name == "pixel_values" or dual:
        inputs["pixel_values"] = pixels(vision, image_sizes(vision)[0], gen)
    if name == "input_values":
        inputs[name] = torch.randn(1, AUDIO[0], generator=gen)
    elif name == "input_features":
        inputs[name] = features(config, gen)[0]
    elif name not in ("pixel_values",) or dual:
        inputs["input_ids"] = torch.randint(3, _vocab(config), (1, SEQ), generator=gen)
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
    lags = max(_ints(getattr(config, "lags_sequence", None)) or [0])
    length = context + lags
    shape = (1, length, channels) if channels > 1 or "num_input_channels" in vars(config) else (1, length)
    out = {"past_values": torch.randn(*shape, generator=gen)}
    feats = _attr(config, "num_time_features")
    if "past_time_features" in params and feats is not None:
        out["past_time_features"] = torch.randn(1, length, feats, generator=gen)
    if "past_observed_mask" in params and "past_time_features" in out:
        out["past_observed_mask"] = torch.ones(shape)
    return out


def candidates(model: torch.nn.Module, config: Any) -> Iterator[dict[str, Any]]:
    """Input dicts to try in order: the base, then without a cache, then other sizes and layouts."""
    gen = torch.Generator().manual_seed(1)
    params = inspect.signature(model.forward).parameters
    first = base(model, config, gen)
    yield first
    extra = {"use_cache": False} if "use_cache" in params else {}
    if extra:
        yield {**first, **extra}
    if "pixel_values" in first:
        vision = _sub(config, "vision_config")
        for size in image_sizes(vision)[1:]:
            yield {**first, "pixel_values": pixels(vision, size, gen), **extra}
    if "input_values" in first:
        for length in AUDIO[1:]:
            yield {**first, "input_values": torch.randn(1, length, generator=gen), **extra}
        for length in AUDIO:
            yield {**first, "input_values": torch.randn(1, 1, length, generator=gen), **extra}
        bins, frames = _attr(config, "num_mel_bins", "feature_size"), _attr(config, "max_length") or 64
        if bins:  # a spectrogram given as input_values: (1, frames, bins)
            yield {**first, "input_values": torch.randn(1, frames, bins, generator=gen), **extra}
    if "input_features" in first:
        for feats in features(config, gen)[1:]:
            yield {**first, "input_features": feats, **extra}


def _has_image_tokens(config: Any) -> bool:
    """True for models that splice image features at image-token positions (they need matched prompts)."""
    return any(getattr(config, k, None) is not None for k in ("image_token_id", "image_token_index"))
