"""Companion inputs keyed on forward parameter names: what a candidate's main tensors imply.

`complete` adds, to one candidate, each input the signature names that a rule here knows how to
make consistently with the tensors already chosen: masks over the feature frames, the patch grid
of a flattened-patch vision encoder (grid_thw, spatial_shapes, patch positions), Q-Former ids,
prompt images, visual features, decision-transformer trajectories. Sizes come from the config.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterator

import torch

SEQ = 8
# A signature naming one of these takes its pixels as a sequence of flattened patches.
PATCH_GRID = ("grid_thw", "image_grid_thw", "spatial_shapes", "pixel_position_ids")


def ints(value: Any) -> list[int]:
    """The ints of `value`: itself, or those in a list or tuple (bools left out)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def attr(config: Any, *keys: str) -> int | None:
    """The first int (or first int of a list) among `keys` on `config`."""
    for key in keys:
        try:
            found = ints(getattr(config, key, None))
        except Exception:  # a per-layer attribute read globally
            found = []
        if found:
            return found[0]
    return None


def sub(config: Any, name: str) -> Any:
    return getattr(config, name, None) or config


def required(params: Any) -> list[str]:
    """The signature's parameters without a default (not *args / **kwargs)."""
    return [n for n, p in params.items() if p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n != "self"]


def channels(vision: Any) -> int:
    return attr(vision, "num_channels", "in_channels", "input_channels", "in_chans") or 3


def width(config: Any) -> int:
    return attr(config, "hidden_size", "d_model", "embed_dim", "dim", "n_embd") or 32


# --- flattened patches -----------------------------------------------------------------------------

def patch_facts(vision: Any) -> dict[str, int]:
    """Patch side, temporal patch, merge (or pooling) factor and channels of a patch-sequence encoder."""
    return {"patch": attr(vision, "patch_size") or 14,
            "temporal": attr(vision, "temporal_patch_size", "patch_temporal") or 1,
            "merge": attr(vision, "spatial_merge_size", "merge_size", "merge_kernel_size",
                          "pooling_kernel_size") or 1,
            "channels": channels(vision)}


def patch_layouts(vision: Any, params: Any, gen: torch.Generator) -> Iterator[dict[str, torch.Tensor]]:
    """A 2x2-merge-unit image as flattened patches with its grid, in the layouts encoders take:
    (N, C*T*P*P) with grid_thw, or (N, C, P, P), (N, C, T, P, P), merge units of pixels (N/M^2, M*P, M*P, C) with the grid in units;
    (1, N, C*P*P) with spatial_shapes / patch positions."""
    f = patch_facts(vision)
    side = 2 * f["merge"]
    n, p, t, c = side * side, f["patch"], f["temporal"], f["channels"]
    name = "hidden_states" if "hidden_states" in required(params) else "pixel_values"
    grid: dict[str, torch.Tensor] = {}
    for key in ("grid_thw", "image_grid_thw"):
        if key in params:
            grid[key] = torch.tensor([[1, side, side]])
    if "spatial_shapes" in params:
        grid["spatial_shapes"] = torch.tensor([[side, side]])
    if "pixel_position_ids" in params:
        ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        grid["pixel_position_ids"] = torch.stack([xs.flatten(), ys.flatten()], -1)[None]
    if "pixel_attention_mask" in params:
        grid["pixel_attention_mask"] = torch.ones(1, n, dtype=torch.long)
    if "merge_sizes" in params:
        grid["merge_sizes"] = torch.tensor([f["merge"]])
    batched = "grid_thw" not in grid and "image_grid_thw" not in grid
    shapes = [(1, n, c * p * p)] if batched else [(n, c * t * p * p), (n, c, p, p), (n, c, t, p, p)]
    for shape in dict.fromkeys(shapes):
        yield {name: torch.rand(*shape, generator=gen), **grid}
    if not batched and f["merge"] > 1:  # merge units of pixels, channels last, the grid counted in units
        m, units = f["merge"], torch.tensor([[1, side // f["merge"], side // f["merge"]]])
        yield {name: torch.rand(n // m ** 2, m * p, m * p, c, generator=gen),
               **{k: units if k in ("grid_thw", "image_grid_thw") else v for k, v in grid.items()}}


def wants_patches(params: Any) -> bool:
    """True when the forward requires a patch grid (a bare vision encoder; a full VLM takes it optionally)."""
    need = required(params)
    return any(k in need for k in PATCH_GRID)


# --- companions of a chosen candidate ----------------------------------------------------------------

Rule = Callable[[Any, dict[str, Any], torch.Generator], "torch.Tensor | None"]


def mel_bins(config: Any) -> int:
    """Feature bins of an audio model: its mel bins, or its speech encoder's input features."""
    audio = sub(config, "audio_config")
    semantic = getattr(config, "semantic_model_config", None)
    return (attr(audio, "num_mel_bins", "feature_size", "input_feat_size", "n_mels", "num_mel_filters")
            or (attr(semantic, "feature_projection_input_dim") if semantic is not None else None) or 80)


def _frames(config: Any, feats: torch.Tensor) -> int:
    """The frame axis length of a (1, bins, T) or (1, T, features) feature tensor."""
    if feats.dim() == 3 and feats.shape[1] != mel_bins(config):  # (1, T, features)
        return feats.shape[1]
    return feats.shape[-1]


def _features_mask(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor | None:
    feats = inputs.get("input_features")
    return torch.ones(1, _frames(config, feats), dtype=torch.long) if isinstance(feats, torch.Tensor) else None


def _mel_mask(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor | None:
    mel = inputs.get("audio_mel")  # (1, T, bins); True marks padding
    return torch.zeros(1, mel.shape[1], dtype=torch.bool) if isinstance(mel, torch.Tensor) else None


def _qformer_ids(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    vocab = attr(sub(config, "qformer_config"), "vocab_size") or 100
    return torch.randint(3, max(4, min(vocab, 100)), (1, SEQ), generator=gen)


def _query_embeds(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    queries = attr(config, "num_query_tokens") or SEQ
    return torch.randn(1, queries, width(sub(config, "qformer_config")), generator=gen)


def _like_pixels(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor | None:
    """A prompt image (or mask) shaped as the candidate's pixel_values."""
    pixels = inputs.get("pixel_values")
    return torch.randn(pixels.shape, generator=gen) if isinstance(pixels, torch.Tensor) else None


def _visual_feats(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    return torch.randn(1, SEQ, attr(config, "visual_feat_dim") or 16, generator=gen)


def _visual_pos(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    return torch.rand(1, SEQ, attr(config, "visual_pos_dim") or 4, generator=gen)


def _embeds(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    length = attr(config, "block_size") or SEQ  # a draft model denoises one block
    return torch.randn(1, length, width(sub(config, "text_config")), generator=gen)


def _context(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    """Hidden states of the target model's tapped layers, concatenated (a draft model's context)."""
    taps = len(ints(getattr(config, "target_layer_ids", None))) or 1
    return torch.randn(1, SEQ, width(config) * taps, generator=gen)


def _latents(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    """A codec decoder's continuous latents: (1, width, frames)."""
    return torch.randn(1, attr(config, "latent_dim", "codebook_dim") or width(config), SEQ, generator=gen)


def _state(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    return torch.randn(1, attr(config, "max_state_dim", "state_dim") or 8, generator=gen)


def _action_embeds(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    """The action chunk plus its state token, at the action expert's width."""
    chunk = (attr(config, "chunk_size") or SEQ) + 1
    return torch.randn(1, chunk, width(sub(config, "dit_config")), generator=gen)


def _target_sizes(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor | None:
    """(1, 2) patch rows and columns of a (1, C, H, W) image."""
    pixels = inputs.get("pixel_values")
    if not isinstance(pixels, torch.Tensor) or pixels.dim() != 4:
        return None
    patch = attr(sub(config, "vision_config"), "patch_size") or 1
    return torch.tensor([[pixels.shape[-2] // patch, pixels.shape[-1] // patch]], dtype=torch.int32)


def _encoder_states(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    """What a Q-Former cross-attends to: image features at its encoder width."""
    return torch.randn(1, SEQ, attr(config, "encoder_hidden_size") or width(config), generator=gen)


def _per_image_mask(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor | None:
    """(1, images) for a (1, images, C, H, W) image list."""
    pixels = inputs.get("pixel_values")
    if isinstance(pixels, torch.Tensor) and pixels.dim() == 5:
        return torch.ones(1, pixels.shape[1], dtype=torch.bool)
    return None


def _text_image_mask(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor | None:
    """(1, tokens, images): every token sees every image of a (1, images, C, H, W) list."""
    pixels, ids = inputs.get("pixel_values"), inputs.get("input_ids")
    if isinstance(pixels, torch.Tensor) and pixels.dim() == 5 and isinstance(ids, torch.Tensor):
        return torch.ones(1, ids.shape[1], pixels.shape[1], dtype=torch.long)
    return None


def _trajectory(key: str, dim_keys: tuple[str, ...]) -> Rule:
    def make(config: Any, inputs: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
        if key == "timesteps":
            return torch.arange(SEQ)[None]
        return torch.randn(1, SEQ, attr(config, *dim_keys) or 1, generator=gen)
    return make


# Added when the signature names the parameter and the candidate lacks it (optional ones too: their
# models read them unconditionally). A rule may return None: nothing to derive it from.
COMPANIONS: dict[str, Rule] = {
    "input_features_mask": _features_mask,
    "audio_mel_mask": _mel_mask,
    "qformer_input_ids": _qformer_ids,
    "prompt_pixel_values": _like_pixels,
    "prompt_masks": _like_pixels,
    "target_sizes": _target_sizes,
    "pixel_attention_mask": _per_image_mask,
    "image_attention_mask": _text_image_mask,
}
# Added only when the signature requires the parameter.
REQUIRED: dict[str, Rule] = {
    "query_embeds": _query_embeds,
    "inputs_embeds": _embeds,
    "visual_feats": _visual_feats,
    "visual_pos": _visual_pos,
    "noise_embeds": _embeds,
    "context_hidden_states": _context,
    "state": _state,
    "action_embeds": _action_embeds,
    "latents": _latents,
    "inputs": lambda config, _inputs, gen: torch.randn(1, SEQ, attr(config, "d_model") or width(config), generator=gen),  # Perceiver without a preprocessor
}
# Decision Transformer style trajectories: (1, T, dim) per stream, dims from the config.
TRAJECTORY: dict[str, Rule] = {
    "states": _trajectory("states", ("state_dim",)),
    "actions": _trajectory("actions", ("act_dim",)),
    "rewards": _trajectory("rewards", ()),
    "returns_to_go": _trajectory("returns_to_go", ()),
    "timesteps": _trajectory("timesteps", ()),
}


def complete(config: Any, params: Any, inputs: dict[str, Any], gen: torch.Generator) -> dict[str, Any]:
    """`inputs` with the companions its signature names (see COMPANIONS, REQUIRED, TRAJECTORY)."""
    out = dict(inputs)
    need = set(required(params))
    rules = [(k, r) for k, r in COMPANIONS.items() if k in params]
    rules += [(k, r) for k, r in REQUIRED.items() if k in need]
    if "states" in params and "returns_to_go" in params:
        rules += list(TRAJECTORY.items())
    for key, rule in rules:
        if key not in out:
            value = rule(config, out, gen)
            if value is not None:
                out[key] = value
    out.update(image_slots(config, params, out))
    out.update(draft_positions(config, params, out))
    if "query_embeds" in need and "encoder_hidden_states" in params:
        out.setdefault("encoder_hidden_states", _encoder_states(config, out, gen))
    if "visual_feats" in need or ("visual_feats" in params and "visual_pos" in params):
        out.setdefault("visual_feats", _visual_feats(config, out, gen))
        out.setdefault("visual_pos", _visual_pos(config, out, gen))
    return out


def image_slots(config: Any, params: Any, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Ids with `latent_query_num` image slots and their position mask (models that write image
    embeddings into the text at masked positions)."""
    slots = attr(config, "latent_query_num")
    if "image_embeds_position_mask" not in params or not slots or "image_embeds_position_mask" in inputs:
        return {}
    ids = inputs.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        return {}
    mask = torch.zeros(1, slots + ids.shape[1], dtype=torch.long)
    mask[:, 1:slots + 1] = 1
    return {"input_ids": torch.cat([ids[:, :1], ids.new_full((1, slots), ids[0, 0]), ids[:, 1:]], 1),
            "image_embeds_position_mask": mask}


def draft_positions(config: Any, params: Any, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Positions (and mask) over context + block for a draft model that attends to the target's
    context hidden states before its own noised block (keys longer than queries)."""
    context, block = inputs.get("context_hidden_states"), inputs.get("noise_embeds")
    if not isinstance(context, torch.Tensor) or not isinstance(block, torch.Tensor):
        return {}
    total = context.shape[1] + block.shape[1]
    out = {}
    if "position_ids" in params and "position_ids" not in inputs:
        out["position_ids"] = torch.arange(total)[None]
    if "attention_mask" in params and "attention_mask" not in inputs:
        out["attention_mask"] = torch.ones(1, total, dtype=torch.long)
    return out
