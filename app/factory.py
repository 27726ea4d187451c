"""`--model module:factory`: import the factory like `python -m` would, build the model, trace it
eagerly, all within the `factory_seconds` limit; every failure is a typed refusal."""
from __future__ import annotations

import importlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

from tracer.errors import TracerError

from .errors import InvalidModelSpecError, ModelFactoryError

from .limits import current as current_limits
from .sources import DEFAULT_INPUT_SHAPE, Loaded, parse_shape

FACTORY_SITE = "--model"


def check_spec(spec: str) -> tuple[str, str]:
    """`module:factory` split in its two names; refused typed when it is not of that form (imports nothing)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidModelSpecError(f"--model {spec!r} is not module:factory", site=FACTORY_SITE)
    return module_name, attr


def import_factory(spec: str) -> Any:
    """The callable named by `module:factory`, importable from the current folder like `python -m`."""
    module_name, attr = check_spec(spec)
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidModelSpecError(f"cannot import {module_name!r}: {exc}", site=FACTORY_SITE) from None
    except SyntaxError as exc:
        raise ModelFactoryError(f"{module_name!r} has a syntax error: {exc.msg} ({Path(exc.filename or '?').name}, "
                                f"line {exc.lineno})", site=FACTORY_SITE) from None
    except Exception as exc:  # the module's own code raised while importing
        raise ModelFactoryError(f"importing {module_name!r} raised {type(exc).__name__}: {_first_line(exc)}",
                                site=FACTORY_SITE) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidModelSpecError(f"{module_name!r} has no callable {attr!r}", site=FACTORY_SITE)
    return factory


def open_factory(spec: str, input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE) -> Loaded:
    """`module:factory` -> the factory's model traced eagerly on inputs of `input_shape`.

    Models with a `config.vocab_size` get token ids; others get a float tensor. Building and the
    capture together may take at most the `factory_seconds` limit.
    """
    input_shape = parse_shape(input_shape)
    factory = import_factory(spec)
    seconds = current_limits().factory_seconds
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["loaded"] = _trace_factory(spec, factory, input_shape)
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=work, name="tlx-factory", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise ModelFactoryError(f"{spec} did not build and run within {seconds:g} s", site=FACTORY_SITE,
                                remedy="Check the factory does not wait on input or the network; if it is just slow, "
                                       "raise the limit: --limit factory_seconds=N.")
    if "error" in result:
        raise result["error"]
    return result["loaded"]


def _trace_factory(spec: str, factory: Any, input_shape: tuple[int, ...]) -> Loaded:
    import tracer

    model, (x,) = build_factory_model(spec, factory, input_shape)
    try:
        trace = tracer.trace(model, (x,))
    except TracerError:
        raise
    except Exception as exc:  # the user's forward raised on this input
        raise ModelFactoryError(f"the forward of {type(model).__name__} raised {type(exc).__name__} on an input of "
                                f"shape {tuple(input_shape)}: {_first_line(exc)}", site=FACTORY_SITE,
                                remedy="Pass an input shape the model accepts with --input-shape.") from None
    return Loaded(trace, f"{trace.model_class} from {spec}", "factory", spec, model=model, inputs=(x,),
                  input_shape=tuple(input_shape))


def build_factory_model(spec: str, factory: Any, input_shape: tuple[int, ...]) -> tuple[Any, tuple]:
    """Call the factory and make its input: token ids when the model has `config.vocab_size`, else a float tensor."""
    import torch

    try:
        model = factory()
    except Exception as exc:
        raise ModelFactoryError(f"calling {spec} raised {type(exc).__name__}: {_first_line(exc)}", site=FACTORY_SITE) from None
    if not isinstance(model, torch.nn.Module):
        raise ModelFactoryError(f"{spec} returned a {type(model).__name__}, not an nn.Module", site=FACTORY_SITE)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    gen = torch.Generator().manual_seed(0)  # a private generator: the global one is left alone
    if isinstance(vocab, int) and vocab > 0:
        x = torch.randint(0, vocab, input_shape, generator=gen)
    else:
        x = torch.randn(input_shape, generator=gen)
    return model, (x,)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:300] if text else ""
