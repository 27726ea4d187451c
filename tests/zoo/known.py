"""Cases of the CI sample that fail today through a defect another stream is fixing (or a typed limit).

Each entry names the failure class (tests.zoo.defects.CLASSES) that the case shows on the landed
code; the sample tests mark exactly these cases xfail(strict=False), so a fix shows as XPASS and
the entry can be removed. Nothing here is a result: the tests still run and record every case.
"""
from __future__ import annotations

# (layer, column) -> (failure class, variants)
NN_KNOWN = {
    ("AdaptiveLogSoftmaxWithLoss", "validate"): ("edge_false_alarm", ("train", "train_no_grad", "eval", "eval_no_grad")),
    ("BCELoss", "validate"): ("edge_false_alarm", ("train", "train_no_grad", "eval", "eval_no_grad")),
    ("BatchNorm1d", "validate"): ("inplace_not_saved", ("train", "train_no_grad")),
    ("BatchNorm2d", "validate"): ("inplace_not_saved", ("train", "train_no_grad")),
    ("BatchNorm3d", "validate"): ("inplace_not_saved", ("train", "train_no_grad")),
    ("CrossMapLRN2d", "validate"): ("edge_false_alarm", ("train", "train_no_grad", "eval", "eval_no_grad")),
    ("Identity", "validate"): ("no_live_calls", ("train", "train_no_grad", "eval", "eval_no_grad")),
    ("KLDivLoss", "validate"): ("edge_false_alarm", ("train", "train_no_grad", "eval", "eval_no_grad")),
    ("LSTM", "validate"): ("replay_not_bit_exact", ("train", "eval")),
    ("LazyBatchNorm1d", "validate"): ("inplace_not_saved", ("train", "train_no_grad")),
    ("LazyBatchNorm2d", "validate"): ("inplace_not_saved", ("train", "train_no_grad")),
    ("LazyBatchNorm3d", "validate"): ("inplace_not_saved", ("train", "train_no_grad")),
    ("MultiheadAttention", "validate"): ("validate_untyped", ("train", "train_no_grad", "eval", "eval_no_grad")),
    **{(name, "capture"): ("fast_path_changed", ("eval_no_grad",)) for name in (
        "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
        "TransformerEncoderLayer")},
    # train mode: dropout inside multi_head_attention_forward replays with another draw
    **{(name, "validate"): ("replay_not_bit_exact", ("train", "train_no_grad")) for name in (
        "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
        "TransformerEncoderLayer")},
}

# The transformers sample: model types whose plain forward runs on the sweep's generated inputs.
HF_SAMPLE = ("albert", "bart", "bert", "bloom", "clip", "convnext", "deberta-v2", "distilbert", "electra", "falcon",
             "gemma2", "gemma3_text", "gpt2", "gpt_neox", "llama", "mistral", "mixtral", "mobilenet_v2", "olmoe",
             "opt", "phi3", "qwen2", "qwen2_moe", "resnet", "roberta", "t5", "vit", "wav2vec2")

# Every trace loaded from a file refuses validation today (offline validation is being added).
HF_ALL_KNOWN = {"reload_validate": "offline_validation"}
# (model type or class name, column) -> failure class (a model type covers its base model and head).
HF_KNOWN = {
    ("bart", "validate"): "edge_false_alarm",
    ("CLIPModel", "validate"): "edge_false_alarm",
    ("deberta-v2", "validate"): "edge_false_alarm",
    ("roberta", "validate"): "edge_false_alarm",
    ("t5", "validate"): "edge_false_alarm",
    ("phi3", "validate"): "validate_untyped",
    ("bart", "weights_free"): "weights_free_refused (typed: value_dependent_branch, transformers reads a value)",
    ("wav2vec2", "weights_free"): "weights_free_refused (typed: mixed_substrate, weight_norm makes real tensors)",
    ("deberta-v2", "weights_free"): "untyped (Tensor.__contains__ reads a value but is not in VALUE_READ_NAMES)",
    ("mixtral", "weights_free"): "untyped (grouped_mm meta kernel refuses float32 on meta)",
    ("olmoe", "weights_free"): "untyped (grouped_mm meta kernel refuses float32 on meta)",
    ("qwen2_moe", "weights_free"): "untyped (grouped_mm meta kernel refuses float32 on meta)",
}
