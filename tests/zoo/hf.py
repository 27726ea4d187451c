"""The transformers sweep: every architecture buildable offline from a shrunken default config.

For each architecture, its base model and its main head go through the six columns (COLUMNS).
Nothing is downloaded: configs are the classes' own defaults, weights are random (HF_HUB_OFFLINE=1).
"""
from __future__ import annotations

import os
import tempfile
from typing import Any

import torch

from .compare import bit_equal
from .outcome import failed, run_column, skipped
from .inputs import candidates
from .shrink import shrink_config

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
    config = _config_for(cls, config)
    torch.manual_seed(0)
    if device != "meta":
        with torch.device(device):
            return cls._from_config(config).eval()
    # weights dropped after a build: parameters on meta (one meta parameter per tied one, as built), buffers real
    # from the config (rotary frequencies, a codec's padding sizes), which the capture swaps for meta copies whose
    # values are known. (accelerate's init_empty_weights() leaves buffers real too, but re-creates each tied
    # parameter on its own: a discharge then refutes the tied weights' attribution.) The configs are tiny.
    with torch.device("cpu"):
        model = cls._from_config(config)
    metas: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for key, p in module._parameters.items():
            if p is not None:
                if id(p) not in metas:
                    metas[id(p)] = torch.nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)
                module._parameters[key] = metas[id(p)]
    return model.eval()


def _config_for(cls: type, config: Any) -> Any:
    """`config`, or the sub-config of the class's own config type where the architecture's config is a
    composite (MusicgenModel is the decoder of MusicgenForConditionalGeneration's config)."""
    wanted = getattr(cls, "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    subs = [v for v in vars(config).values() if isinstance(v, wanted)]
    return subs[0] if len(subs) == 1 else config


def make_inputs(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    """The first candidate inputs (tests.zoo.inputs) for the model: its main input and required tensors."""
    return next(candidates(model, config))


def fitting_inputs(model_type: str, class_name: str, attempts: int = 12) -> tuple[Any, torch.nn.Module, dict, Any]:
    """(config, model, inputs, output) for the first candidate inputs on which the plain forward runs.

    A failed attempt rebuilds the model (a forward may change it); the last error is raised."""
    error: Exception | None = None
    config = tiny_config(model_type)
    model = build(class_name, config)
    for k, inputs in enumerate(candidates(model, config)):
        if k >= attempts:
            break
        if k:
            config = tiny_config(model_type)
            model = build(class_name, config)
        try:
            torch.manual_seed(0)
            return config, model, inputs, model(**inputs)
        except Exception as exc:  # these inputs do not fit: try the next
            error = error or exc
    raise error if error is not None else RuntimeError("no candidate inputs")


def sweep_class(model_type: str, class_name: str) -> dict[str, Any]:
    """The six columns for one class of one architecture; a row of the results JSON."""
    row: dict[str, Any] = {"model_type": model_type, "class": class_name}
    state: dict[str, Any] = {}

    def forward():
        config, model, inputs, plain = fitting_inputs(model_type, class_name)
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
        # the same inputs, given with their values: they enter as meta tensors whose values are known
        # (tracer/weights_free/known_inputs.py), so reads of input values (grid_thw.tolist(), mask.all())
        # are answered and disclosed; reads that depend on weights still refuse
        state["structure"] = tracer.trace(meta, (), state["inputs"], capture=tracer.CaptureOptions(structure_only=True, simulate_device="cpu"))  # the twin runs on the cpu

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
