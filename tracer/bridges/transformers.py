"""Hugging Face on-ramps to weights-free capture: configs, meta construction, ids and text.

Nothing here downloads: configs come from `static/configs/` or a local path, tokenizers from
a local folder. `trace_config("llama-3.1-8b")` is the one-liner: config -> meta model -> Trace.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from ..errors import (ConfigInvalidError, ConfigNotFoundError, InvalidInputError, PaddedPromptError,
                      TokenizerNotFoundError)
from ..ir import Trace
from ..configs import shipped_configs
from ..options import CaptureOptions

DEFAULT_INPUT_SHAPE = (1, 8)


def load_config(name_or_path: str | Path) -> Any:
    """A transformers config from a shipped name ("llama-3.1-8b"), a config JSON, or a folder with config.json."""
    from transformers import AutoConfig

    text = str(name_or_path)
    path = shipped_configs().get(text) or Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigNotFoundError(f"no shipped config named {text!r} and no config file at that path",
                                  site=f"load_config({text!r})",
                                remedy=f"Use a shipped config ({', '.join(shipped_configs())}) or a local config JSON.")
    try:
        data = json.loads(path.read_text())
        model_type = data.pop("model_type")
    except (ValueError, KeyError, AttributeError) as exc:
        raise ConfigInvalidError(f"{path} is not a transformers config ({exc!r})", site=str(path),
                                 remedy="A config JSON needs at least `model_type`.") from None
    return AutoConfig.for_model(model_type, **data)


def model_class_for(config: Any) -> type | None:
    """The transformers class a config names first in `architectures` (None when it names none known)."""
    import transformers

    names = list(getattr(config, "architectures", None) or [])
    return getattr(transformers, names[0], None) if names else None


def build_meta_model(config: Any, *, dtype: torch.dtype | None = None,
                     attn_implementation: str | None = None) -> nn.Module:
    """Construct `config`'s model (its first `architectures` entry) on the meta device, in eval mode."""
    cls = model_class_for(config)
    if cls is None:
        names = list(getattr(config, "architectures", None) or [])
        raise ConfigInvalidError(f"the config names no transformers architecture ({names or 'none'})",
                                 site="config.architectures",
                                remedy='Add "architectures": ["LlamaForCausalLM"] (or the model class) to the config.')
    kwargs: dict[str, Any] = {}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    with torch.device("meta"):
        model = cls._from_config(config, **kwargs)
    return model.eval()


def meta_input_ids(input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE) -> torch.Tensor:
    """Token ids of `input_shape` on the meta device (int64, no values)."""
    return torch.empty(tuple(input_shape), dtype=torch.long, device="meta")


def trace_ids(model: nn.Module, input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE, **input_kwargs: Any) -> Trace:
    """Structure-only capture of a meta model on meta ids (no mask: works on every attention backend)."""
    from ..tracing import trace

    return trace(model, (meta_input_ids(input_shape),), input_kwargs,
                 capture=CaptureOptions(structure_only=True))


def trace_config(name_or_path: str | Path, input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE, *,
                 dtype: torch.dtype | None = None, attn_implementation: str | None = None) -> Trace:
    """Config -> meta model -> structure-only Trace, in one call; no weights, no download."""
    model = build_meta_model(load_config(name_or_path), dtype=dtype, attn_implementation=attn_implementation)
    return trace_ids(model, input_shape).with_provenance(config_source=str(name_or_path))


def trace_training_step(name_or_path: str | Path, input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE, *,
                        checkpointing: bool = False, dtype: torch.dtype | None = None) -> Trace:
    """Config -> meta model in train mode -> structure-only forward and backward (`trace.backward`).

    The loss is the logits' sum (or the first floating output's); attention is eager, so the
    bytes saved for the backward do not depend on which fused kernel a real device would pick.
    With `checkpointing`, transformers' activation checkpointing (non-reentrant) is on.
    """
    from ..tracing import trace

    model = build_meta_model(load_config(name_or_path), dtype=dtype, attn_implementation="eager")
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = meta_input_ids(input_shape)
    mask = torch.ones(tuple(input_shape), dtype=torch.long, device="meta")  # no packed-sequence value check
    result = trace(model, (ids,), {"attention_mask": mask}, capture=CaptureOptions(structure_only=True, backward=True))
    return result.with_provenance(config_source=str(name_or_path))


def load_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object as given, or loaded from a local folder / tokenizer.json (never downloaded)."""
    if not isinstance(tokenizer, (str, Path)):
        return tokenizer
    from transformers import PreTrainedTokenizerFast

    path = Path(tokenizer).expanduser()
    if path.is_dir() and not (path / "tokenizer.json").is_file():
        raise TokenizerNotFoundError(f"no tokenizer.json in {path}", site=str(path),
                                     remedy="Save a tokenizer there (tokenizer.save_pretrained(folder)).")
    if path.is_file():
        return PreTrainedTokenizerFast(tokenizer_file=str(path))
    if not path.is_dir():
        raise TokenizerNotFoundError(f"no tokenizer at {path}", site=str(path),
                                     remedy="Pass a local folder holding tokenizer.json, or a tokenizer object.")
    return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)


def encode_text(text: str | Sequence[str], tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Real token ids and an all-ones mask; refuses prompts that would need padding."""
    tok = load_tokenizer(tokenizer)
    texts = [text] if isinstance(text, str) else list(text)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise InvalidInputError("text must be a string or a list of strings", site="trace_text(text=...)")
    rows = [_ids_of(tok, t) for t in texts]
    lengths = sorted({len(r) for r in rows})
    if len(lengths) > 1:
        raise PaddedPromptError(f"the prompts tokenize to different lengths {lengths}; batching them needs padding",
                                site="trace_text(text=...)", lengths=lengths)
    ids = torch.tensor(rows, dtype=torch.long)
    return ids, torch.ones_like(ids)


def _ids_of(tok: Any, text: str) -> list[int]:
    enc = tok(text)
    ids, mask = list(enc["input_ids"]), enc.get("attention_mask")
    if mask is not None and not all(int(m) == 1 for m in mask):
        raise PaddedPromptError("the tokenizer padded the prompt (its attention mask has zeros)",
                                site="trace_text(tokenizer=...)", padded_positions=[i for i, m in enumerate(mask) if not m],
                                remedy="Disable padding on the tokenizer (tokenizer.padding_side / no pad_to_length).")
    if not ids:
        raise InvalidInputError("the text tokenizes to no ids", site="trace_text(text=...)")
    return ids


def trace_text(model: nn.Module, text: str | Sequence[str], *, tokenizer: Any,
               capture: CaptureOptions | None = None, loss: Any = None, **input_kwargs: Any) -> Trace:
    """Trace `model` on tokenized text with an all-ones mask: structure-only for a meta model, eager otherwise.

    `capture` is passed to the capture whole (every field holds; None: structure-only on a meta model,
    the default options on a real one), `loss` as `tracer.trace`'s. On meta only the ids' shape travels
    (the ids go to meta) and the mask is declared all-ones; prompts that would need padding refuse typed.
    Under an attention backend that reads the mask's values (sdpa), the meta capture refuses typed.
    """
    return text_trace(model, text, tokenizer, capture, loss, input_kwargs)


def text_trace(model: nn.Module, text: Any, tokenizer: Any, capture: CaptureOptions | None, loss: Any,
               input_kwargs: Any) -> Trace:
    """`trace_text`'s work, with the model's other keyword inputs as one mapping (what `tracer.trace` has)."""
    from ..tracing import trace

    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"trace() needs an nn.Module, got {type(model).__name__}", site="trace(model=...)")
    if input_kwargs is not None and not (isinstance(input_kwargs, Mapping) and all(isinstance(k, str) for k in input_kwargs)):
        raise InvalidInputError("input_kwargs must be a mapping of keyword names to inputs", site="trace(input_kwargs=...)")
    input_kwargs = dict(input_kwargs or {})
    if tokenizer is None:
        raise TokenizerNotFoundError("text needs a tokenizer to become token ids", site="trace(text, tokenizer=None)",
                                     remedy="Pass tokenizer= a tokenizer object or a local folder holding tokenizer.json.")
    if capture is not None and not isinstance(capture, CaptureOptions):
        raise InvalidInputError(f"capture must be a CaptureOptions, got {type(capture).__name__}",
                                site="trace_text(capture=...)")
    made = sorted({"input_ids", "attention_mask"} & set(input_kwargs))
    if made:
        raise InvalidInputError(f"the text route makes {made} from the text; they cannot also be passed",
                                site="trace_text(**input_kwargs)", remedy="Pass token ids to tracer.trace instead of text, "
                                                                           "or drop input_ids / attention_mask.")
    ids, mask = encode_text(text, tokenizer)
    meta = any(p.is_meta for p in model.parameters())
    if meta:
        ids, mask = ids.to("meta"), torch.ones_like(ids, device="meta")
    options = capture if capture is not None else CaptureOptions(structure_only=meta)
    result = trace(model, (), {"input_ids": ids, "attention_mask": mask, **input_kwargs}, capture=options, loss=loss)
    if result.envelope is not None:
        result = _declare_all_ones_mask(result)
    return result.with_provenance(text_route={"prompts": 1 if isinstance(text, str) else len(text),
                                              "tokens": int(ids.shape[-1]), "mask": "all_ones"})


def _declare_all_ones_mask(result: Trace) -> Trace:
    """The meta mask was built all-ones by `trace_text`: the twin's mask policy says so (a new trace)."""
    env = result.envelope
    sealed = env.to_dict()
    plan = {**sealed["input_plan"], "attention_mask": "all_ones (declared by trace_text)"}
    declared = env.evolve("mask_declared_all_ones", twin={**sealed["twin"], "attention_mask": "all_ones"},
                          input_plan=plan)  # the sealed twin keeps what the capture added (the simulated device)
    twin = {**(result.provenance.twin or {}), "attention_mask": "all_ones"}
    return result.with_provenance(twin=twin).with_envelope(declared)


def register_attention(model: nn.Module, backend: str | None = None) -> str:
    """Switch `model` to a value-free attention implementation over its backend (tracer.bridges.attention)."""
    from .attention import register_attention as register

    return register(model, backend)
