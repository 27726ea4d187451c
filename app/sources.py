"""What the explorer opens: the embedded default, a config JSON, a saved trace, or a user's model.

Every route ends in a `Loaded` record; the tracing itself is done by `tracer` and its bridges.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.bridges.transformers import build_meta_model, load_config, meta_input_ids, trace_ids
from tracer.configs import shipped_configs
from .errors import FeatureUnavailableError, InvalidInputShapeError, InvalidModelSpecError, SourceNotFoundError

DEFAULT_CONFIG = "llama-3.1-8b"
DEFAULT_INPUT_SHAPE: tuple[int, ...] = (1, 8)


@dataclass
class Loaded:
    """A trace ready to explore, with what made it (the live model when there is one)."""

    trace: Any
    title: str
    origin: str  # "config" | "trace-file" | "factory"
    source: str  # the path, config name or module:factory it came from
    model: Any = None  # the model traced (meta or real), for the doctor; None for a file
    inputs: tuple = ()
    config_path: Path | None = None  # the config a weights-free trace was built from
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE
    notes: list[str] = field(default_factory=list)


def resolve_config(name_or_path: str | Path) -> Path:
    """A shipped config name ("gpt2") or a path to a config JSON / a folder holding config.json."""
    text = str(name_or_path)
    shipped = shipped_configs()
    if text in shipped:
        return shipped[text]
    path = Path(text).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if path.is_file():
        return path
    raise SourceNotFoundError(
        f"no shipped config named {text!r} and no config file at that path",
        site=f"config {text!r}",
        remedy=f"Use a shipped config ({', '.join(shipped) or 'none found'}) or a path to a config JSON.",
    )


def parse_shape(text: str | tuple | list | None) -> tuple[int, ...]:
    """"1,8" or "1x8" or (1, 8) -> (1, 8); refuses anything that is not positive integers."""
    if text is None or text == "":
        return DEFAULT_INPUT_SHAPE
    if isinstance(text, (tuple, list)):
        parts = list(text)
    else:
        parts = [p for p in str(text).replace("x", ",").replace(" ", ",").strip("()[]").split(",") if p]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise InvalidInputShapeError(f"input shape {text!r} is not a list of positive integers", site="input shape")
    return shape


def is_config_json(path: Path) -> bool:
    """True for a transformers-style config file (has model_type or architectures)."""
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            return False
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def open_default(input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE) -> Loaded:
    """The embedded default: the shipped Llama-3.1-8B-class config, captured weights-free."""
    return open_config(DEFAULT_CONFIG, input_shape)


def open_config(name_or_path: str | Path, input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE) -> Loaded:
    """Build the config's model on the meta device and capture it structure-only."""
    path = resolve_config(name_or_path)
    _require_transformers()
    model = build_meta_model(load_config(str(path)))
    trace = trace_ids(model, input_shape).with_provenance(config_source=str(path))
    inputs = (meta_input_ids(input_shape),)
    title = f"{trace.model_class} from {path.name} (weights-free)"
    return Loaded(trace, title, "config", str(path), model=model, inputs=inputs, config_path=path,
                  input_shape=tuple(input_shape))


def open_trace_file(path: str | Path) -> Loaded:
    """A trace saved with `Trace.save` (a folder, its trace.json, or the app's .zip of the folder).

    Refused typed by `tracer.load` when invalid.
    """
    import tracer

    p = Path(path)
    trace = tracer.load(str(unzip_trace(p) if p.suffix == ".zip" else p))
    return Loaded(trace, f"{trace.model_class} from {Path(path).name}", "trace-file", str(path))


def unzip_trace(path: Path) -> Path:
    """Extract a zipped trace folder into a temporary folder (member names are checked)."""
    import tempfile
    import zipfile

    from tracer.errors import TraceFileCorruptError

    out = Path(tempfile.mkdtemp(prefix="tlx-trace-"))
    try:
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if "/" in name or "\\" in name or name.startswith("."):
                    raise TraceFileCorruptError(f"unexpected member {name!r} in {path.name}", site=str(path))
                zf.extract(name, out)
    except zipfile.BadZipFile as exc:
        raise TraceFileCorruptError(f"{path.name} is not a zip file ({exc})", site=str(path)) from None
    return out


def open_path(path: str | Path, input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE) -> Loaded:
    """A config JSON (captured weights-free) or a saved trace, decided by the file's content."""
    p = Path(path).expanduser()
    if not p.exists() and str(path) not in shipped_configs():
        raise SourceNotFoundError(f"nothing at {str(path)!r}", site=str(path))
    if str(path) in shipped_configs() or is_config_json(p):
        return open_config(path, input_shape)
    return open_trace_file(p)


def open_factory(spec: str, input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE) -> Loaded:
    """`module:factory` -> the factory's model traced eagerly on inputs of `input_shape`.

    Models with a `config.vocab_size` get token ids; others get a float tensor.
    """
    import torch

    import tracer

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidModelSpecError(f"--model {spec!r} is not module:factory", site="--model")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InvalidModelSpecError(f"cannot import {spec!r}: {exc}", site="--model") from None
    model = factory()
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    torch.manual_seed(0)
    if vocab:
        x = torch.randint(0, int(vocab), input_shape)
    else:
        x = torch.randn(input_shape)
    trace = tracer.trace(model, (x,))
    return Loaded(trace, f"{trace.model_class} from {spec}", "factory", spec, model=model, inputs=(x,),
                  input_shape=tuple(input_shape))


def open_source(path: str | None = None, model: str | None = None,
                input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE) -> Loaded:
    """The CLI's choice: `--model` wins, then PATH, else the embedded default."""
    if model:
        return open_factory(model, input_shape)
    if path:
        return open_path(path, input_shape)
    return open_default(input_shape)


def _require_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        raise FeatureUnavailableError(
            "weights-free capture of a config needs the transformers package, which is not installed",
            site="transformers", remedy="pip install 'torchlens-explore[hf]'")
