"""What the explorer opens: the embedded default, a config JSON, a saved trace, or a user's model
(`app.factory`).

Every route ends in a `Loaded` record; the tracing itself is done by `tracer` and its bridges.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tracer.configs import shipped_configs
from tracer.bounded_io import open_regular, read_capped
from tracer.errors import InputNotRegularFileError, InputTooLargeError, TraceFileCorruptError, TracerError

from . import tempdirs
from .config_check import build_checked, read_config
from .errors import FeatureUnavailableError, InvalidInputShapeError, SourceNotFoundError
from .limits import current as current_limits

DEFAULT_CONFIG = "llama-3.1-8b"
DEFAULT_INPUT_SHAPE: tuple[int, ...] = (1, 8)

Step = Callable[[str], None]  # told each stage as it starts (app.startup.STAGE_TEXT): import, model, capture, read


def _no_step(key: str) -> None:
    return None


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
    if path.exists() and not path.is_dir():
        raise InputNotRegularFileError(f"{text!r} is not a regular file (a FIFO, a device or a link to one)",
                                       site=f"config {text!r}")
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
    limits = current_limits()
    limits.check("input_rank", len(shape), f"the rank of input shape {shape}", "input shape")
    elements = 1
    for d in shape:
        elements *= d
    limits.check("input_elements", elements, f"the element count of input shape {shape}", "input shape")
    return shape


def token_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Refuse a shape that is not (batch, sequence): a config's model reads token ids of rank 2."""
    if len(shape) != 2:
        raise InvalidInputShapeError(f"input shape {shape} has rank {len(shape)}; token ids are (batch, sequence)",
                                     site="input shape", remedy="Write the input shape as batch,sequence, e.g. 1,8.")
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
        data = json.loads(read_capped(path, current_limits().config_bytes).decode("utf-8"))
    except (TracerError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def open_default(input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE, *, step: Step = _no_step) -> Loaded:
    """The embedded default: the shipped Llama-3.1-8B-class config, captured weights-free."""
    return open_config(DEFAULT_CONFIG, input_shape, step=step)


def check_config(name_or_path: str | Path, input_shape: tuple[int, ...] | str = DEFAULT_INPUT_SHAPE) -> Path:
    """The config's path once its file, values and the input shape pass the checks that need no torch
    (refused typed otherwise): what `open_config` checks before it imports transformers."""
    path = resolve_config(name_or_path)
    token_shape(parse_shape(input_shape))
    _require_transformers()
    read_config(path)
    return path


def open_config(name_or_path: str | Path, input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE, *,
                training_step: bool = False, step: Step = _no_step) -> Loaded:
    """Build the config's model on the meta device and capture it structure-only (with `training_step`:
    one training step, forward and backward, as `tracer.bridges.transformers.trace_training_step`)."""
    path = check_config(name_or_path, input_shape)
    input_shape = token_shape(parse_shape(input_shape))
    step("import")
    from tracer.bridges.transformers import build_meta_model, load_config, meta_input_ids, trace_ids

    step("model")
    config = build_checked(path, "reading the config with transformers", lambda: load_config(str(path)))
    model = build_checked(path, "building the model on the meta device", lambda: build_meta_model(config))
    step("capture")
    if training_step:
        from tracer.bridges.transformers import trace_training_step

        trace = build_checked(path, "the weights-free training step", lambda: trace_training_step(str(path), input_shape))
    else:
        trace = build_checked(path, "the structure-only capture", lambda: trace_ids(model, input_shape))
    trace = trace.with_provenance(config_source=str(path))
    inputs = (meta_input_ids(input_shape),)
    title = f"{trace.model_class} from {path.name} (weights-free{', training step' if training_step else ''})"
    return Loaded(trace, title, "config", str(path), model=model, inputs=inputs, config_path=path,
                  input_shape=tuple(input_shape))


def open_trace_file(path: str | Path, *, step: Step = _no_step) -> Loaded:
    """A trace saved with `Trace.save` (a folder, its trace.json, or the app's .zip of the folder).

    Refused typed by `tracer.load` when invalid; a zip's extraction folder is removed after loading.
    """
    step("import")
    import tracer

    step("read")
    p = Path(path)
    if p.suffix != ".zip":
        trace = tracer.load(str(p))
    else:
        folder = unzip_trace(p)
        try:
            trace = tracer.load(str(folder))
        finally:
            tempdirs.remove(folder)
    return Loaded(trace, f"{trace.model_class} from {p.name}", "trace-file", str(path))


def unzip_trace(path: Path) -> Path:
    """Extract a zipped trace folder into a temporary folder: plain member names, capped count and size."""
    import zipfile

    limits = current_limits()
    fd = open_regular(path)  # a FIFO or a device named .zip is refused at once, not read
    out = tempdirs.make("tlx-trace-")
    try:
        with os.fdopen(fd, "rb") as raw, zipfile.ZipFile(raw) as zf:
            members = zf.infolist()
            limits.check("zip_members", len(members), f"the member count of {path.name}", str(path))
            total = 0
            for info in members:
                name = info.filename
                if "/" in name or "\\" in name or name.startswith(".") or info.is_dir():
                    raise TraceFileCorruptError(f"unexpected member {name!r} in {path.name}", site=str(path))
                with zf.open(info) as src, open(out / name, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        total += len(chunk)
                        limits.check("zip_bytes", total, f"the extracted size of {path.name} (bytes, so far)", str(path))
                        dst.write(chunk)
    except zipfile.BadZipFile as exc:
        tempdirs.remove(out)
        raise TraceFileCorruptError(f"{path.name} is not a zip file ({exc})", site=str(path)) from None
    except (TracerError, OSError, RuntimeError, ValueError, EOFError) as exc:
        tempdirs.remove(out)
        if isinstance(exc, TracerError):
            raise
        raise TraceFileCorruptError(f"{path.name} cannot be extracted ({type(exc).__name__}: {exc})",
                                    site=str(path)) from None
    return out
def path_kind(path: str | Path) -> str:
    """"config" or "trace" for what is at `path` (decided by the file's content), refused typed when neither."""
    p = Path(path).expanduser()
    if str(path) in shipped_configs() or is_config_json(p):
        return "config"
    if not p.exists():
        raise SourceNotFoundError(f"nothing at {str(path)!r}", site=str(path))
    kind = _file_kind(p)
    if kind == "neither":
        raise SourceNotFoundError(f"{p.name} is neither a saved trace nor a model config", site=str(p),
                                  remedy="Open a saved trace (its folder, trace.json or .trace.zip) or a config JSON.")
    return kind  # a "config" kind is refused in a config's terms (encoding, size, values) when opened


def open_path(path: str | Path, input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE, *, step: Step = _no_step) -> Loaded:
    """A config JSON (captured weights-free) or a saved trace, decided by the file's content."""
    if path_kind(path) == "config":
        return open_config(path, input_shape, step=step)
    return open_trace_file(Path(path).expanduser(), step=step)


def _file_kind(p: Path) -> str:
    """"trace" (a folder, trace.json, a zip, or JSON with a schema version), "config", or "neither"."""
    if p.is_dir() or p.suffix == ".zip" or p.name == "trace.json":
        return "trace"
    if p.suffix != ".json":
        return "neither"
    try:
        data = json.loads(read_capped(p, current_limits().config_bytes).decode("utf-8"))
    except (InputTooLargeError, InputNotRegularFileError, ValueError, RecursionError):
        return "config"  # the config reader refuses it in a config's terms (size, file kind, text)
    except TracerError:
        return "trace"
    if isinstance(data, dict) and "schema_version" in data:
        return "trace"
    return "neither"


def open_source(path: str | None = None, model: str | None = None,
                input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE, *, step: Step = _no_step) -> Loaded:
    """The CLI's choice: `--model` wins, then PATH, else the embedded default."""
    if model:
        from .factory import open_factory

        step("import")
        import tracer  # noqa: F401  (torch and the tracer: the factory's stage is its own work)

        step("factory")
        return open_factory(model, input_shape)
    if path:
        return open_path(path, input_shape, step=step)
    return open_default(input_shape, step=step)


def check_source(path: str | None = None, model: str | None = None,
                 input_shape: tuple[int, ...] | str = DEFAULT_INPUT_SHAPE) -> str:
    """What `open_source` will open ("factory", "config" or "trace-file"), once the checks that need no
    torch pass: the input shape, the `module:factory` form, the path's kind, a config's file and values."""
    shape = parse_shape(input_shape)
    if model:
        from .factory import check_spec

        check_spec(model)
        return "factory"
    if path and path_kind(path) == "trace":
        return "trace-file"
    check_config(path or DEFAULT_CONFIG, shape)
    return "config"


def _require_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        raise FeatureUnavailableError(
            "weights-free capture of a config needs the transformers package, which is not installed",
            site="transformers", remedy="pip install 'torchlens-explore[hf]'")
