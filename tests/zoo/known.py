"""Cases of the CI sample that fail today through a defect another stream is fixing (or a typed limit).

Each entry names the failure class (tests.zoo.defects.CLASSES) that the case shows on the landed
code; the sample tests mark exactly these cases xfail(strict=False), so a fix shows as XPASS and
the entry can be removed. Nothing here is a result: the tests still run and record every case.
"""
from __future__ import annotations

# (layer, column) -> (failure class, variants)
NN_KNOWN = {
}

# The transformers sample: model types whose plain forward runs on the sweep's generated inputs.
HF_SAMPLE = ("albert", "bart", "bert", "bloom", "clip", "convnext", "deberta-v2", "distilbert", "electra", "falcon",
             "gemma2", "gemma3_text", "gpt2", "gpt_neox", "llama", "mistral", "mixtral", "mobilenet_v2", "olmoe",
             "opt", "phi3", "qwen2", "qwen2_moe", "resnet", "roberta", "t5", "vit", "wav2vec2")

# Columns failing for every architecture (none since offline validation landed).
HF_ALL_KNOWN: dict[str, str] = {}
# (model type or class name, column) -> failure class (a model type covers its base model and head).
HF_KNOWN: dict[tuple[str, str], str] = {}  # the MoE device branch is simulated since CaptureOptions.simulate_device
