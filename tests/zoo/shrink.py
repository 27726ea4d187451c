"""A tiny config from a transformers config class's own defaults: small widths, depths, vocab, images, audio.

Every field is derived from the defaults by a rule (no per-family table), so a new architecture
in transformers is shrunk the same way.
"""
from __future__ import annotations

import functools
import math
from typing import Any

WIDTH = 32
LAYOUT_WIDTH = 48
HEADLESS_WIDTH = 64
DERIVED_KEYS = ("true_hidden_size",)  # MobileBERT derives it from intra_bottleneck_size
HEADS = 4
FFN = 64
LAYERS = 2
VOCAB = 256
IMAGE = 32
POSITIONS = 64

WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "embedding_size", "word_embed_proj_dim",
              "projection_dim", "text_embed_dim", "vision_embed_dim", "hidden_dim", "model_dim", "d_embed")
HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
             "n_heads", "attention_heads", "pred_num_attention_heads")  # V-JEPA 2: its predictor's own
KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")
FFN_KEYS = ("intermediate_size", "ffn_dim", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner",
            "hidden_dim_ffn", "moe_intermediate_size", "shared_expert_intermediate_size", "ffn_hidden_size",
            "mlp_dim", "dim_feedforward")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers", "n_layers",
              "num_decoder_layers", "num_encoder_layers", "depth")
VOCAB_KEYS = ("vocab_size",)
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx",
                 "max_length")
IMAGE_KEYS = ("image_size", "img_size")
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_k", "moe_topk", "top_k", "num_selected_experts")
LORA_RANK = 16
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def shrink_config(config: Any) -> Any:
    """Shrink `config` in place (and its sub-configs at every depth: a vision config's own encoder
    config too); returns it."""
    pending, seen, parents = [config], set(), {id(config): None}
    order, defaults = [], {}
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        order.append(current)
        defaults[id(current)] = dict(vars(current))
        _shrink_one(current)
        for name in _sub_config_names(current):
            child = getattr(current, name)
            parents.setdefault(id(child), current)
            pending.append(child)
    for current in order:
        _fill_vocabulary_map(current)
        _fill_token_indexer(current)
        _borrow_missing(current, parents, order)
        _follow_sibling_widths(current, defaults)
        _follow_backbone_lists(current, defaults)
        _rederive_cross_output(current)
        subs = [getattr(current, name) for name in _sub_config_names(current)]
        if any("width_coefficient" in vars(sub) for sub in subs) and "projection_dim" in defaults[id(current)]:
            _set(current, "projection_dim", defaults[id(current)]["projection_dim"])  # ALIGN: EfficientNet's own width
    return config


def _fill_vocabulary_map(config: Any) -> None:
    """Chameleon and Emu3 build their image-token mapping from `vocabulary_map`, which a config made from
    defaults leaves None (the real one ships with the tokenizer): the special tokens their constructors
    read, as the last ids of the vocabulary, and one visual token per id below them (a text forward
    reads none of those)."""
    if "vocabulary_map" not in vars(config) or config.vocabulary_map is not None:
        return
    vocab = _int(config, "vocab_size") or _int(getattr(config, "text_config", None), "vocab_size") or 0
    if vocab < 8:
        return
    special = {"<image>": vocab - 1, "<|extra_200|>": vocab - 2, "<racm3:break>": vocab - 3, "<eoss>": vocab - 4}
    count = min(vocab - 8, 64)
    emu3 = {f"<|visual token {i:06d}|>": i + 4 for i in range(count)}  # Emu3's names
    letters = str.maketrans("0123456789", "ABCDEFGHIJ")
    chameleon = {f"IMGIMG{str(i).translate(letters)}Z": i + 4 for i in range(count)}  # Chameleon's: digits as letters
    _set(config, "vocabulary_map", {**(chameleon if "chameleon" in type(config).__name__.lower() else emu3), **special})


INDEXER = {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 8,
           "indexer_compress_ratio": 4}


def _fill_token_indexer(config: Any) -> None:
    """Qwen4-Exp's indexed attention layers build a token indexer from fields its defaults leave None (the
    real ones ship with the checkpoint): small values for all of them (one key head, as it requires)."""
    if all(k in vars(config) and vars(config)[k] is None for k in INDEXER) and \
            "indexed_attention" in (vars(config).get("layer_types") or ()):
        for key, value in INDEXER.items():
            _set(config, key, value)


def _rederive_cross_output(config: Any) -> None:
    """BLT's global transformer projects the encoder's patch states when encoder width x cross_attn_k
    differs from its own width (encoder_cross_output_size, set in the parent's __post_init__ from the
    unshrunken widths): re-derived from the shrunken ones."""
    encoder, world = vars(config).get("encoder_config"), vars(config).get("global_config")
    k = _int(config, "cross_attn_k")
    if encoder is None or world is None or not k or "encoder_cross_output_size" not in vars(world):
        return
    size = _int(encoder, "hidden_size") * k
    _set(world, "encoder_cross_output_size", size if size != _int(world, "hidden_size") else None)


def _follow_backbone_lists(config: Any, defaults: dict[int, dict]) -> None:
    """A list in a config that mirrors a sub-config's per-stage list (SAM 2's backbone_channel_list, the
    Hiera stage widths reversed) follows it; feature sizes derived from the image and stride re-derived."""
    for sub in (getattr(config, name) for name in _sub_config_names(config)):
        sub_defaults = defaults.get(id(sub), {})
        for key, value in defaults.get(id(config), {}).items():
            if not isinstance(value, list) or not value or vars(config).get(key) != value:
                continue
            for sub_key, sub_value in sub_defaults.items():
                now = vars(sub).get(sub_key)
                if isinstance(sub_value, (list, tuple)) and isinstance(now, (list, tuple)) and now != sub_value:
                    if list(sub_value)[::-1] == value:
                        _set(config, key, list(now)[::-1])
                    elif list(sub_value) == value:
                        _set(config, key, list(now))
        image = _first_int(sub_defaults.get("image_size"))
        stride = _first_int(sub_defaults.get("patch_stride")) or _first_int(sub_defaults.get("patch_size"))
        sizes, now = vars(config).get("backbone_feature_sizes"), _first_int(vars(sub).get("image_size"))
        if image and stride and now and isinstance(sizes, list) and all(isinstance(v, list) and v for v in sizes):
            grid, new_grid = image // stride, max(1, now // stride)  # each level a multiple or fraction of the grid
            scales = [v[0] / grid for v in sizes]
            if all((x * new_grid).is_integer() for x in scales):
                _set(config, "backbone_feature_sizes", [[int(x * new_grid)] * 2 for x in scales])


def _first_int(value: Any) -> int | None:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    return _int_of(value)


def _follow_sibling_widths(config: Any, defaults: dict[int, dict]) -> None:
    """A sub-config's *channels field whose default is a sibling's default width (SAM's vision
    output_channels, the mask decoder's hidden_size) follows that sibling's shrunken width; so does
    a position embedding's num_pos_feats, half of it."""
    subs = [getattr(config, name) for name in _sub_config_names(config)]
    for a in subs:
        for b in subs:
            before, after = _width_of(defaults.get(id(b), {})), _width_of(vars(b))
            if a is b or not before or not after or before == after:
                continue
            for key, value in defaults.get(id(a), {}).items():
                if "channels" in key and value == before and vars(a).get(key) == value:
                    _set(a, key, after)
                elif key == "num_pos_feats" and value == before // 2 and vars(a).get(key) == value:
                    _set(a, key, after // 2)  # a sine position embedding: half the width per axis


# Attributes some models read from a config whose default class does not define them (DBRX's attention
# config and rope_theta, Musicgen's and T5Gemma2's dropout, Moonshine Streaming's kv heads, BLT's depth).
BORROWED = ("rope_theta", "dropout", "dropout_rate", "num_key_value_heads", "num_hidden_layers")


def _has(config: Any, key: str) -> bool:
    try:
        getattr(config, key)
    except AttributeError:
        return False
    except Exception:  # a per-layer attribute read globally: it is defined
        return True
    return True


def _borrow_missing(config: Any, parents: dict[int, Any], configs: list) -> None:
    """Each BORROWED attribute the config lacks and its modeling code reads, from its nearest ancestor
    that has it, else a sub-config's (the deepest relative last); rope_theta also from a rope table."""
    ancestors, up = [], parents.get(id(config))
    while up is not None:
        ancestors.append(up)
        up = parents.get(id(up))
    below = [c for c in configs if c is not config and config in _ancestors_of(c, parents)]
    parent = parents.get(id(config))
    names = ["config"] + [k for k, v in (vars(parent).items() if parent is not None else ()) if v is config]
    for key in BORROWED:
        if _has(config, key) or not _code_reads(config, names, key):
            continue
        if key == "num_key_value_heads" and _int(config, "num_attention_heads"):  # transformers' own default
            _set(config, key, _int(config, "num_attention_heads"))
            continue
        for relative in [config, *ancestors, *below]:
            value = _borrowable(relative, key, relative is not config)
            if value is not None:
                _set(config, key, value)
                break
        else:
            if "dropout" in key:  # no relative has one: no dropout (the sweep runs in eval mode)
                _set(config, key, 0.0)


def _code_reads(config: Any, names: list[str], key: str) -> bool:
    """Whether the config's modeling module reads `<name>.<key>` for one of the names it goes by
    (`config`, or its attribute in its parent: DBRX's `attn_config`)."""
    import re

    source = _modeling_source(config)
    pattern = r"(?<![\w.])(?:%s)\.%s\b" % ("|".join(map(re.escape, names)), re.escape(key))
    return bool(source and re.search(pattern, source))


def _modeling_source(config: Any) -> str:
    """The text of the modeling module beside the config's module ('' if none)."""
    return _module_text(type(config).__module__.replace(".configuration_", ".modeling_"))


@functools.lru_cache(maxsize=None)
def _module_text(name: str) -> str:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin:
        return ""
    with open(spec.origin) as f:
        return f.read()


def _ancestors_of(config: Any, parents: dict[int, Any]) -> list:
    found, up = [], parents.get(id(config))
    while up is not None:
        found.append(up)
        up = parents.get(id(up))
    return found


def _borrowable(config: Any, key: str, other: bool) -> Any:
    if other and key in vars(config) and vars(config)[key] is not None:
        return vars(config)[key]
    rope = vars(config).get("rope_parameters")
    if key == "rope_theta" and isinstance(rope, dict) and isinstance(rope.get("rope_theta"), (int, float)):
        return rope["rope_theta"]
    return None


def _sub_config_names(config: Any) -> list[str]:
    from transformers import PretrainedConfig

    return [k for k, v in vars(config).items() if isinstance(v, PretrainedConfig)]


def _set(config: Any, key: str, value: Any) -> None:
    try:
        setattr(config, key, value)
    except Exception:  # a read-only property: leave the default
        pass


def _int(config: Any, key: str) -> int | None:
    try:  # a per-layer attribute read globally raises (Gemma 4's head_dim)
        value = getattr(config, key, None) if key in vars(config) else None
    except Exception:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shrink_one(config: Any) -> None:
    defaults = dict(vars(config))
    heads, before = HEADS, None
    for key in HEAD_KEYS:
        if _int(config, key) is not None:
            before = before or _int(config, key)
            heads = min(_int(config, key), HEADS) or 1
            _set(config, key, heads)
    for key in KV_KEYS:
        kv = _int(config, key)
        if kv is not None:  # as many kv heads as heads stays so (latent attention, ESM-C's k_norm); grouped stays grouped
            _set(config, key, heads if before and kv >= before else 2 if heads % 2 == 0 and kv > 1 else 1)
        elif key in vars(config) and vars(config)[key] is None and before is not None:  # vars: a per-layer attribute read globally raises
            _set(config, key, heads)  # unset: one kv head per head, the usual meaning (Nemotron divides by it)
    # A 2-D layout model (LiLT, LayoutLMv3) splits its width into six box embeddings: a multiple of 6 and of the heads.
    width = LAYOUT_WIDTH if "max_2d_position_embeddings" in vars(config) else WIDTH
    if before is None and "patch_size" in vars(config) and _int(config, "num_hidden_layers") is not None:
        width = HEADLESS_WIDTH  # a vision tower with no head count derives it as width // 64 (BridgeTower)
    for key in WIDTH_KEYS:
        if key == "hidden_dim" and "width_coefficient" in vars(config):
            continue  # EfficientNet: the top width is round_filters(1280), derived from the coefficient
        if _int(config, key) is not None and _int(config, key) > width:
            _set(config, key, width)
    multiplier = getattr(config, "depth_multiplier", None)  # MobileNet: every channel count scaled (min_depth floors it)
    if isinstance(multiplier, float) and multiplier > 0.25:
        _set(config, "depth_multiplier", 0.25)
    if _int(config, "coordinate_size") and _int(config, "shape_size"):  # 4 coordinates + 2 shapes make the width
        _set(config, "coordinate_size", width // 6)
        _set(config, "shape_size", width // 6)
    head_dim = width // heads
    if "head_dim" in vars(config) and (_int(config, "head_dim") is not None or vars(config)["head_dim"] is None):
        _set(config, "head_dim", head_dim)
    _shrink_latent_heads(config, head_dim)
    _keep_rotated_pairs(config)
    if _int_of(defaults.get("head_dim")) and defaults.get("head_dim") == defaults.get("qk_head_dim"):
        _set(config, "head_dim", _int(config, "qk_head_dim"))  # Mistral 4: its rope part is head_dim x partial
    _shrink_rope_sections(config, head_dim)
    if _int(config, "rotary_dim") is not None:  # the rotated part of a head fits in the head
        _set(config, "rotary_dim", min(_int(config, "rotary_dim"), _int(config, "head_dim") or head_dim))
    for key in FFN_KEYS:
        if _int(config, key) is not None and _int(config, key) > FFN:
            _set(config, key, FFN)
    for key in list(vars(config)):  # a width named for what it feeds (encoder_hidden_size, cross_hidden_size)
        if (key.endswith("_hidden_size") or key == "hidden_size_global") and key not in FFN_KEYS + DERIVED_KEYS and (_int(config, key) or 0) > width:
            _set(config, key, width)
    _shrink_width_valued(config, defaults, before)
    _shrink_state_heads(config, heads)
    for key in LAYER_KEYS:
        if _int(config, key) is not None and _int(config, key) > LAYERS:
            _set(config, key, LAYERS)
    _shrink_lists(config)
    _shrink_stages(config, defaults)
    for key in VOCAB_KEYS:
        if _int(config, key) is not None and _int(config, key) > VOCAB:
            _set(config, key, VOCAB)
    vocab = _int(config, "vocab_size")
    if vocab is not None:
        for key, value in list(vars(config).items()):
            if key.endswith("token_id") and isinstance(value, int) and value >= vocab:
                _set(config, key, vocab - 1 - (hash(key) % 8))
    for key in POSITION_KEYS:
        if _int(config, key) is not None and _int(config, key) > POSITIONS:
            _set(config, key, POSITIONS)
    for key in IMAGE_KEYS:
        if _int(config, key) is not None and _int(config, key) > IMAGE:
            _set(config, key, IMAGE)
        elif isinstance(vars(config).get(key), (list, tuple)) and all(isinstance(v, int) for v in vars(config)[key]):
            _set(config, key, [min(v, IMAGE) for v in vars(config)[key]])  # [height, width]
    stage_widths = vars(config).get("embed_dim_per_stage")
    width_before = _width_of(defaults)
    if isinstance(stage_widths, list) and stage_widths and (defaults.get("embed_dim_per_stage") or [None])[0] == width_before:
        for key in WIDTH_KEYS:  # the width is the first stage's (SAM 2's Hiera)
            if defaults.get(key) == width_before:
                _set(config, key, stage_widths[0])
    image, patch = _int_of(defaults.get("image_size")), _int_of(defaults.get("patch_size"))
    if image and patch and defaults.get("image_embedding_size") == image // patch and _int(config, "image_size"):
        _set(config, "image_embedding_size", _int(config, "image_size") // _int(config, "patch_size"))  # SAM's grid
    parts, width_before = vars(config).get("axial_pos_embds_dim"), _width_of(defaults)
    if isinstance(parts, (list, tuple)) and width_before and sum(parts) == width_before and _width_of(vars(config)):
        _set(config, "axial_pos_embds_dim", _split_like(_width_of(vars(config)), list(parts)))  # Reformer: they sum to the width
    if _int(config, "max_img_size") is not None:  # TVP pads frames to it: a ResNet backbone needs 64 px at least
        _set(config, "max_img_size", min(_int(config, "max_img_size"), 2 * IMAGE))
    if _int(config, "visual_prompt_size") is not None:  # TVP's frame pad: well inside the image
        _set(config, "visual_prompt_size", min(_int(config, "visual_prompt_size"), IMAGE // 4))
    moe = _int(config, "moe_intermediate_size") is not None
    for key in EXPERT_KEYS + ("n_routed_experts",):
        if _int(config, key) is not None and _int(config, key) > 4 or moe and key in vars(config) and vars(config)[key] is None:
            _set(config, key, 4)  # a mixture whose default leaves its expert count unset (dots1) gets 4
    for key in ("n_shared_experts", "num_shared_experts"):
        if moe and key in vars(config) and vars(config)[key] is None:
            _set(config, key, 1)
    for key in ("n_group", "num_expert_group", "topk_group", "num_groups_topk"):  # one group of the 4 experts
        if _int(config, key) is not None and _int(config, key) > 1:
            _set(config, key, 1)
    for key in TOP_K_KEYS:
        if _int(config, key) is not None:
            _set(config, key, min(2, _int(config, key)))
        elif moe and key in vars(config) and vars(config)[key] is None:
            _set(config, key, 2)
    if "prediction_length" in vars(config) and vars(config)["prediction_length"] is None:
        _set(config, "prediction_length", 4)  # a forecaster needs a horizon
        if vars(config).get("context_length", 0) is None:  # ... and its context defaults to it (the config's
            _set(config, "context_length", 4)  # __init__ did that before the horizon was set here)
    if vars(config).get("use_timm_backbone"):  # timm is not installed: the config's own transformers backbone
        _set(config, "use_timm_backbone", False)
    _replace_timm_backbone(config)
    if _int(config, "sliding_window") is not None:
        _set(config, "sliding_window", 4)
    languages = vars(config).get("languages")
    if "default_language" in vars(config) and vars(config)["default_language"] is None and languages:
        _set(config, "default_language", list(languages)[0])  # X-MOD refuses an input without a language
    if "vocab_size" in vars(config) and vars(config)["vocab_size"] is None:  # a CTC head needs a vocabulary
        _set(config, "vocab_size", VOCAB)
    if "clip_qkv" in vars(config) and vars(config)["clip_qkv"] is None and _unguarded_clip(config):
        _set(config, "clip_qkv", 8.0)  # DBRX clamps by it with no `if clip_qkv` guard
    _fill_layer_type_defaults(config)


NORM_GROUPS = 4


def _width_of(values: dict) -> int | None:
    return next((v for k in WIDTH_KEYS if isinstance(v := values.get(k), int) and not isinstance(v, bool)), None)


def _shrink_width_valued(config: Any, defaults: dict, heads_before: int | None) -> None:
    """Fields whose default is the model's width (or one head's width) under another name (Mimi's
    upsample_groups, xLSTM's embedding_dim, WavTokenizer's codebook_dim, Bros's dim_bbox_projection)
    follow the width; GroupNorm group counts (num_groups) divide the shrunken channels."""
    width_before, width = _width_of(defaults), _width_of(vars(config))
    if not width_before or not width or width_before < 64 or width_before == width:
        return
    head_before = defaults.get("head_dim") if isinstance(defaults.get("head_dim"), int) else (
        width_before // heads_before if heads_before else None)
    handled = set(WIDTH_KEYS + HEAD_KEYS + KV_KEYS + FFN_KEYS + LAYER_KEYS + VOCAB_KEYS + POSITION_KEYS + IMAGE_KEYS)
    for key, value in defaults.items():
        if isinstance(value, (list, tuple)) and value and all(v == width_before for v in value) and \
                key not in handled and "channels" in key and vars(config).get(key) == value:
            _set(config, key, [width] * len(value))  # per-level widths (D-FINE's decoder_in_channels)
            continue
        if key in handled or key.startswith("_") or not isinstance(value, int) or isinstance(value, bool):
            continue
        if not any(part in key for part in ("group", "dim", "size", "channels")) or _int(config, key) != value:
            continue
        if value == width_before:
            _set(config, key, width)
        elif head_before and head_before >= 16 and value == head_before and "dim" in key and "head_dim" not in key:
            _set(config, key, _int(config, "head_dim") or width // HEADS)
    if (_int(config, "num_groups") or 0) > NORM_GROUPS:
        _set(config, "num_groups", NORM_GROUPS)


def _shrink_state_heads(config: Any, heads: int) -> None:
    """A state-space mixer (Mamba-2) splits expand x width into heads x head_dim, in n_groups groups
    dividing the heads: head_dim follows the shrunken width, n_groups the shrunken heads."""
    expand, width = vars(config).get("expand"), _width_of(vars(config))
    if isinstance(expand, (int, float)) and width and _int(config, "head_dim") is not None and \
            _int(config, "num_heads") is not None:
        _set(config, "head_dim", max(1, int(expand * width) // _int(config, "num_heads")))
        groups = _int(config, "n_groups")
        if groups is not None and _int(config, "num_heads") % groups:
            _set(config, "n_groups", math.gcd(groups, _int(config, "num_heads")))


def _shrink_stages(config: Any, defaults: dict) -> None:
    """A hierarchical vision model (Swin) with its stage count in a layer key: the per-stage lists cut
    to the shrunken count, and a final width derived as embed_dim x 2^(stages-1) re-derived."""
    stages_before = _int_of(defaults.get("num_layers"))
    stages = _int(config, "num_layers")
    depths = vars(config).get("depths")
    if not stages_before or not stages or not isinstance(depths, (list, tuple)) or len(depths) != stages_before:
        return
    names, outputs = vars(config).get("stage_names"), getattr(config, "out_features", None)
    if names and outputs and list(outputs) != [names[-1]]:  # a backbone: its stages are named outputs
        stages = stages_before
        _set(config, "num_layers", stages)
    for key, value in list(vars(config).items()):
        if isinstance(value, (list, tuple)) and len(value) == stages_before and key != "stage_names":
            _set(config, key, list(value[:stages]))
    embed, hidden = _int_of(defaults.get("embed_dim")), _int_of(defaults.get("hidden_size"))
    if embed and hidden == embed * 2 ** (stages_before - 1) and _int(config, "embed_dim"):
        _set(config, "hidden_size", _int(config, "embed_dim") * 2 ** (stages - 1))


def _unguarded_clip(config: Any) -> bool:
    import re

    source = _modeling_source(config)
    return "clip_qkv" in source and not re.search(r"^\s*if [\w.]*clip_qkv[^\n]*:\s*$", source, re.M)


def _int_of(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fill_layer_type_defaults(config: Any) -> None:
    """Per-layer-type settings a default config leaves unset: an empty per-type rope table
    (Cohere Compass) gets the default rope for each type; an unset window gets one (Step3p7 builds a
    sliding mask whatever its layer types)."""
    kinds = vars(config).get("layer_types")
    if not isinstance(kinds, (list, tuple)) or not kinds:
        return
    rope = vars(config).get("rope_parameters")
    if isinstance(rope, dict) and "rope_type" not in rope and not any(isinstance(v, dict) for v in rope.values()):
        _set(config, "rope_parameters", {k: {"rope_type": "default", "rope_theta": 10000.0, **rope} for k in set(kinds)})
    source = _modeling_source(config)
    if "sliding_window" in vars(config) and vars(config)["sliding_window"] is None and \
            '"sliding_attention": create_sliding_window_causal_mask(' in source and "has_sliding_layers" not in source:
        _set(config, "sliding_window", 4)  # its model builds a sliding mask whatever the layer types


TIMM_FAMILIES = ("resnet", "swin")  # timm backbone names with a transformers backbone of the same family


def _replace_timm_backbone(config: Any) -> None:
    """A timm backbone (DETR's resnet50, OmDet-Turbo's swin) replaced by transformers' backbone of the
    same family with the same output stages: timm is not installed beside this torch."""
    backbone = vars(config).get("backbone_config")
    if getattr(backbone, "model_type", None) != "timm_backbone":
        return
    family = next((f for f in TIMM_FAMILIES if str(getattr(backbone, "backbone", "")).startswith(f)), None)
    if family is None:
        return
    from transformers import AutoConfig

    stages = [f"stage{i}" for i in getattr(backbone, "out_indices", None) or (1, 2, 3, 4)]
    _set(config, "backbone_config", AutoConfig.for_model(family, out_features=stages,
                                                         num_channels=getattr(backbone, "num_channels", 3)))
    if vars(config).get("timm_kwargs"):  # timm's own constructor arguments (OmDet-Turbo's img_size)
        _set(config, "timm_kwargs", {})


def _keep_rotated_pairs(config: Any) -> None:
    """A per-layer-type partial rope (NeoMME's 0.25 on full-attention layers) still rotates four dims, two
    frequencies, of the shrunken head: head_dim widened to 4 / partial_rotary_factor where it fell short."""
    rope, head = vars(config).get("rope_parameters"), _int(config, "head_dim")
    if not isinstance(rope, dict) or head is None or "qk_rope_head_dim" in vars(config):  # that sizes the part itself
        return
    tables = [v for v in rope.values() if isinstance(v, dict)]  # per layer type (a flat rope may size its own part)
    partials = [t["partial_rotary_factor"] for t in tables if isinstance(t.get("partial_rotary_factor"), (int, float))]
    if partials and 0 < min(partials) and head * min(partials) < 4:
        _set(config, "head_dim", math.ceil(4 / min(partials)))


def _shrink_latent_heads(config: Any, head_dim: int) -> None:
    """Split head widths (MLA's rope/nope/value parts, low-rank projections) shrunk to one head width each;
    a sum field (qk_head_dim) kept the sum of its parts."""
    for key in list(vars(config)):
        if key.endswith("_head_dim") and key != "qk_head_dim" and _int(config, key) is not None:
            _set(config, key, head_dim)
        elif key.endswith("lora_rank") and _int(config, key) is not None and _int(config, key) > LORA_RANK:
            _set(config, key, LORA_RANK)
    if _int(config, "qk_head_dim") is not None:
        parts = [_int(config, k) or 0 for k in ("qk_nope_head_dim", "qk_rope_head_dim")]
        _set(config, "qk_head_dim", sum(parts) or head_dim)


def _shrink_rope_sections(config: Any, head_dim: int) -> None:
    """A multimodal rope's per-axis sections (mrope_section) re-split to sum to half the rotated part of the
    shrunken head (head_dim x partial_rotary_factor), in the proportions of the default; where the model's
    code holds the default (`rope_parameters.get("mrope_section", [16, 24, 24])`), that default is set first."""
    rope = vars(config).get("rope_parameters")
    if not isinstance(rope, dict):
        return
    coded = _coded_mrope_section(config)
    if coded or "mrope_section" in getattr(type(config), "ignore_keys_at_rope_validation", ()):
        rope.setdefault("mrope_section", coded or [0, 0, 0])
    partial = rope.get("partial_rotary_factor") or vars(config).get("partial_rotary_factor") or 1.0
    total = int((_int(config, "head_dim") or head_dim) * partial) // 2
    for key in ("mrope_section", "mrope_sections"):
        sections = rope.get(key)
        if isinstance(sections, (list, tuple)) and sections and all(isinstance(v, int) for v in sections):
            rope[key] = _split_like(total, list(sections))


def _coded_mrope_section(config: Any) -> list[int] | None:
    """The mrope_section default written in the model's modeling module, if any."""
    import re

    found = re.search(r'"mrope_section",\s*\[([\d,\s]+)\]', _modeling_source(config))
    return [int(v) for v in found.group(1).split(",") if v.strip()] if found else None


def _split_like(total: int, defaults: list[int]) -> list[int]:
    """`total` split into len(defaults) parts in their proportions; the remainder goes first to parts
    whose default is unique, so parts equal by default (Ernie's height and width) stay equal."""
    weights = defaults if sum(defaults) > 0 else [1] * len(defaults)
    exact = [total * w / sum(weights) for w in weights]
    parts = [int(x) for x in exact]
    order = sorted(range(len(parts)), key=lambda i: (weights.count(weights[i]) > 1, -(exact[i] - parts[i]), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def _shrink_lists(config: Any) -> None:
    """Per-layer lists (layer_types, depths, hidden_sizes) cut to the shrunken depth; widths capped."""
    layers = next((_int(config, k) for k in LAYER_KEYS if _int(config, k) is not None), None)
    for key, value in list(vars(config).items()):
        if not isinstance(value, (list, tuple)) or not value:
            continue
        if key in ("layer_types", "block_types") and layers is not None:
            kept = _keep_each_kind(value, layers)
            _set(config, key, kept)
            for layer_key in LAYER_KEYS:
                if _int(config, layer_key) is not None and _int(config, layer_key) == layers:
                    _set(config, layer_key, len(kept))
        elif key in ("attention_layers", "mlp_only_layers") and layers is not None:
            _set(config, key, value[:layers])
        elif key == "backbone_out_indices" and layers is not None and all(isinstance(v, int) for v in value):
            # DPT keeps the outputs of these layers, one per neck width: as many layers as indices, each kept
            for layer_key in LAYER_KEYS:
                if _int(config, layer_key) == layers:
                    _set(config, layer_key, max(layers, len(value)))
            _set(config, key, list(range(len(value))))
        elif key in ("depths", "num_layers_per_stage") and all(isinstance(v, int) for v in value):
            _set(config, key, [min(v, 1) for v in value])
        elif key in HEAD_KEYS and all(isinstance(v, int) for v in value):  # per stage, widths doubling
            _set(config, key, [min(v, 2 ** i) for i, v in enumerate(value)])
        elif key == "hidden_sizes" and "stage_out_channels" in vars(config):
            continue  # HGNetV2: the stage widths live in stage_*_channels; hidden_sizes reports them
        elif key in ("hidden_sizes", "embed_dims", "dims", "embed_dim_per_stage") and all(isinstance(v, int) for v in value):
            _set(config, key, [min(v, 16 * (i + 1)) for i, v in enumerate(value)])
            if key == "hidden_sizes" and _int(config, "stem_out_channels") == value[0]:  # TextNet: the stem feeds stage 1
                _set(config, "stem_out_channels", min(value[0], 16))


def _keep_each_kind(kinds: list, layers: int) -> list:
    """The first `layers` entries, widened so every kind of layer (sliding, full, linear ...) stays present."""
    kept = list(kinds[:layers])
    for kind in kinds:
        if kind not in kept:
            kept.append(kind)
    return kept
