"""The transformers sweep: every architecture buildable offline from a shrunken default config.

For each architecture, its base model and its main head go through the six columns (COLUMNS).
Nothing is downloaded: configs are the classes' own defaults, weights are random (HF_HUB_OFFLINE=1).
"""
from __future__ import annotations

import inspect
import os
import tempfile
from typing import Any

import torch

from .compare import bit_equal
from .outcome import failed, run_column, skipped
from .shrink import IMAGE, shrink_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

COLUMNS = ("forward", "capture", "validate", "reload_validate", "weights_free", "discharge")
# Main head, in order of preference: the first mapping that lists the architecture.
HEAD_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_CTC_MAPPING_NAMES",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES", "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
    "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
)
SEQ = 8


def architectures() -> list[str]:
    """Every `model_type` with a base model in transformers' auto mapping, sorted."""
    from transformers.models.auto import modeling_auto

    return sorted(modeling_auto.MODEL_MAPPING_NAMES)


def classes_of(model_type: str) -> list[str]:
    """The base model class name and the main head class name (when one is mapped) of `model_type`."""
    from transformers.models.auto import modeling_auto

    names = [_first(modeling_auto.MODEL_MAPPING_NAMES[model_type])]
    for mapping in HEAD_MAPPINGS:
        head = getattr(modeling_auto, mapping, {}).get(model_type)
        if head:
            names.append(_first(head))
            break
    return names


def _first(name: Any) -> str:
    return name[0] if isinstance(name, (list, tuple)) else name


def tiny_config(model_type: str) -> Any:
    """The config class's defaults, shrunken (see tests.zoo.shrink)."""
    from transformers import AutoConfig

    return shrink_config(AutoConfig.for_model(model_type))


def build(class_name: str, config: Any, device: str = "cpu") -> torch.nn.Module:
    """`class_name` built from `config` with seeded random weights (or on meta), in eval mode."""
    import transformers

    cls = getattr(transformers, class_name)
    torch.manual_seed(0)
    with torch.device(device):
        model = cls._from_config(config)
    if device == "meta":  # legacy constructors (torch.Tensor(n), torch.LongTensor(...)) ignore the device context
        model.to("meta")
    return model.eval()


def make_inputs(model: torch.nn.Module, config: Any) -> dict[str, torch.Tensor]:
    """Inputs for the model's main input (ids, pixels or audio), plus decoder ids for encoder-decoders."""
    gen = torch.Generator().manual_seed(1)
    name = getattr(model, "main_input_name", "input_ids")
    text = getattr(config, "text_config", None) or config
    vision = getattr(config, "vision_config", None) or config
    vocab = min(int(getattr(text, "vocab_size", None) or 100), 100)
    inputs: dict[str, torch.Tensor] = {}
    params = inspect.signature(model.forward).parameters
    dual = {"input_ids", "pixel_values"} <= set(params) and not _has_image_tokens(config)
    if name == "pixel_values" or dual:
        channels = int(getattr(vision, "num_channels", 3) or 3)
        size = getattr(vision, "image_size", IMAGE) or IMAGE
        size = size if isinstance(size, int) else IMAGE
        inputs["pixel_values"] = torch.randn(1, channels, size, size, generator=gen)
    if dual:  # a dual encoder (CLIP-like): text and image together
        inputs["input_ids"] = torch.randint(3, vocab, (1, SEQ), generator=gen)
    elif name == "pixel_values":
        pass
    elif name == "input_values":
        inputs[name] = torch.randn(1, 1600, generator=gen)
    elif name == "input_features":
        bins = int(getattr(config, "num_mel_bins", 80) or 80)
        inputs[name] = torch.randn(1, bins, 64, generator=gen)
    else:
        inputs["input_ids"] = torch.randint(3, vocab, (1, SEQ), generator=gen)
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = torch.randint(3, vocab, (1, SEQ // 2), generator=gen)
    return inputs


def _has_image_tokens(config: Any) -> bool:
    """True for models that splice image features at image-token positions (they need matched prompts)."""
    return any(getattr(config, k, None) is not None for k in ("image_token_id", "image_token_index"))


def sweep_class(model_type: str, class_name: str) -> dict[str, Any]:
    """The six columns for one class of one architecture; a row of the results JSON."""
    row: dict[str, Any] = {"model_type": model_type, "class": class_name}
    state: dict[str, Any] = {}

    def forward():
        config = tiny_config(model_type)
        model = build(class_name, config)
        inputs = make_inputs(model, config)
        torch.manual_seed(0)
        plain = model(**inputs)
        # The capture gets a freshly built twin (same seed): some models change on their first call
        # (BigBird swaps its attention, others fill caches), and the weights-free capture is a first call too.
        fresh = build(class_name, tiny_config(model_type))
        state.update(config=config, model=fresh, inputs=inputs, plain=plain)
        state["params"] = sum(p.numel() for p in model.parameters())

    def capture():
        import tracer

        torch.manual_seed(0)
        state["trace"] = t = tracer.trace(state["model"], (), state["inputs"])
        if not bit_equal(t.output, state["plain"]):
            return failed("output_not_bit_equal", "the traced output differs from the plain forward")

    def validate():
        import tracer
        from tracer.replay.validate import validation_report

        report = validation_report(state["trace"])
        if not report.passed:
            first = report.findings[0]
            return failed("validation_failed", f"[{first.check}] {first.label}: {first.message}")
        del tracer

    def reload_validate():
        import tracer

        with tempfile.TemporaryDirectory() as folder:
            state["trace"].save(folder)
            loaded = tracer.load(folder)
            # offline: replay from the stored call templates; a trace file holds no parameters
            report = tracer.validate(loaded, params=state["model"])
            if not report.passed:
                first = report.findings[0]
                return failed("validation_failed", f"[{first.check}] {first.label}: {first.message}")

    def weights_free():
        import tracer

        meta = build(class_name, tiny_config(model_type), device="meta")  # a fresh config: some models edit theirs
        meta_inputs = {k: v.to("meta") for k, v in state["inputs"].items()}
        state["structure"] = tracer.trace(meta, (), meta_inputs, capture=tracer.CaptureOptions(structure_only=True, simulate_device="cpu"))  # the twin runs on the cpu

    def discharge():
        result = state["structure"].discharge_against(state["trace"])
        if result.state != "CORROBORATED":
            return failed(result.state.lower(), str(result))

    steps = {"forward": forward, "capture": capture, "validate": validate, "reload_validate": reload_validate,
             "weights_free": weights_free, "discharge": discharge}
    needs = {"capture": "forward", "validate": "capture", "reload_validate": "capture",
             "weights_free": "forward", "discharge": ("capture", "weights_free")}
    row["forward"] = run_column(forward)
    if row["forward"]["result"] != "pass":  # the sweep's inputs do not fit: not a tracer result
        row["forward"] = {"result": "unavailable", "code": row["forward"].get("code"),
                          "reason": row["forward"].get("reason", "")}
    for column in COLUMNS[1:]:
        missing = [n for n in _tuple(needs.get(column)) if row[n]["result"] != "pass" and not
                   (n == "capture" and "trace" in state)]
        if missing:
            row[column] = skipped(f"needs {' and '.join(missing)}")
            continue
        row[column] = run_column(steps[column])
    row["params"] = state.get("params")
    return row


def _tuple(value: Any) -> tuple:
    if value is None:
        return ()
    return value if isinstance(value, tuple) else (value,)
