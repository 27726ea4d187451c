"""The real twin behind a discharge: what the user asked for, what it costs, and capturing it.

The app only orchestrates: the model comes from transformers, the capture from `tracer.trace`,
the comparison from `structure_trace.discharge_against(real_trace)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tracer.errors import InvalidInputError

from .errors import TwinTooLargeError
from tracer.estimates import dtype_bytes

from .sources import parse_shape, resolve_config

DTYPES = ("float32", "bfloat16", "float16")
ATTENTION = ("eager", "sdpa")
HEADROOM = 0.8  # use at most this share of the memory the kernel says is available
OVERHEAD = 1.2  # allocator and framework overhead over the raw estimate

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class TwinSpec:
    """The real twin the user describes in the discharge panel."""

    config: str
    dtype: str = "float32"
    seed: int = 0
    checkpoint: str = ""  # a local folder with weights; empty: random weights from `seed`
    input_shape: tuple[int, ...] = (1, 8)
    ids: str = ""  # explicit token ids "1, 2, 3"; wins over the shape
    text: str = ""  # raw text, tokenized with `tokenizer`
    tokenizer: str = ""  # a local tokenizer folder
    attn: str = "eager"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes the twin needs (labelled estimate) against what this machine has available."""

    params: int
    param_bytes: int
    activation_bytes: int
    available_bytes: int

    @property
    def total_bytes(self) -> int:
        return int((self.param_bytes + self.activation_bytes) * OVERHEAD)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.available_bytes * HEADROOM

    def describe(self) -> str:
        verdict = "fits" if self.fits else "does not fit"
        return (f"Estimate: {self.params:,} parameters, {_gib(self.param_bytes)} of weights + "
                f"{_gib(self.activation_bytes)} of activations (x{OVERHEAD} overhead) = "
                f"{_gib(self.total_bytes)}; available {_gib(self.available_bytes)} "
                f"(using at most {int(HEADROOM * 100)}%): {verdict}.")


def structure_defaults(structure: Any) -> tuple[str, str]:
    """The dtype and attention backend the structure-only trace was captured with (the twin's defaults)."""
    dtype = next((r.dtype for r in structure.params.values() if not r.is_buffer), "float32")
    attn = (structure.provenance.twin or {}).get("attn_implementation") or "eager"
    return (dtype if dtype in DTYPES else "float32"), (attn if attn in ATTENTION else "eager")


def available_memory() -> int:
    """MemAvailable from /proc/meminfo in bytes (0 when it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def estimate(spec: TwinSpec, structure: Any) -> MemoryEstimate:
    """Weights (parameter count of the twin's config x dtype bytes) plus the structure's activations."""
    from tracer.estimates import trace_totals

    params = _config_param_count(spec.config)
    act = trace_totals(structure)["activation_bytes_estimate"]
    struct_dtype = next((op.out.dtype for op in structure.ops if op.out is not None and op.out.dtype.startswith(("float", "bfloat"))), "float32")
    act = int(act * dtype_bytes(spec.dtype) / max(dtype_bytes(struct_dtype), 1))
    return MemoryEstimate(params, params * dtype_bytes(spec.dtype), act, available_memory())


def check_fits(est: MemoryEstimate, spec: TwinSpec) -> None:
    """Refuse politely (typed) when the twin would not fit in this machine's memory."""
    if not est.fits:
        raise TwinTooLargeError(
            f"the real twin of {Path(spec.config).stem} in {spec.dtype} needs about {_gib(est.total_bytes)}, "
            f"and this machine has {_gib(est.available_bytes)} available",
            site="discharge panel", estimate_bytes=est.total_bytes, available_bytes=est.available_bytes,
        )


def capture_twin(spec: TwinSpec, progress: Progress) -> Any:
    """Build the real twin (random weights from the seed, or a local checkpoint) and capture it eagerly."""
    import torch

    import tracer

    progress(0.1, "building the real twin")
    model = build_twin(spec)
    progress(0.45, "preparing inputs")
    ids = twin_inputs(spec)
    progress(0.55, f"capturing the real twin on ids of shape {tuple(ids.shape)}")
    with torch.no_grad():
        real = tracer.trace(model, (ids,), capture=tracer.CaptureOptions(save="none"))
    return real


def discharge(structure: Any, spec: TwinSpec, progress: Progress) -> tuple[Any, Any]:
    """Estimate, refuse if too big, capture the twin, discharge; returns (report, real trace)."""
    progress(0.02, "estimating memory")
    check_fits(estimate(spec, structure), spec)
    real = capture_twin(spec, progress)
    progress(0.85, "discharging the claims")
    report = structure.discharge_against(real)
    progress(1.0, f"done: {report.state}")
    return report, real


def build_twin(spec: TwinSpec) -> Any:
    """The twin model on CPU: `from_pretrained` of a local folder, or `from_config` seeded."""
    import torch

    dtype = _torch_dtype(spec.dtype)
    cls, config = _model_class(spec.config)
    if spec.checkpoint:
        folder = Path(spec.checkpoint).expanduser()
        if not folder.is_dir():
            raise InvalidInputError(f"no checkpoint folder at {spec.checkpoint!r}", site="discharge panel: checkpoint",
                                    remedy="Give a local folder written by save_pretrained, or leave it empty for random weights.")
        model = cls.from_pretrained(str(folder), dtype=dtype, attn_implementation=spec.attn, local_files_only=True)
    else:
        torch.manual_seed(int(spec.seed))
        make = getattr(cls, "_from_config", None) or cls.from_config
        model = make(config, dtype=dtype, attn_implementation=spec.attn)
    return model.eval()


def twin_inputs(spec: TwinSpec) -> Any:
    """Token ids from explicit ids, from text through a local tokenizer, or seeded random ids."""
    import torch

    if spec.ids.strip():
        try:
            values = [int(v) for v in spec.ids.replace(",", " ").split()]
        except ValueError:
            raise InvalidInputError(f"token ids {spec.ids!r} are not integers", site="discharge panel: ids",
                                    remedy="Write ids separated by commas or spaces, e.g. 1, 2, 3.") from None
        return torch.tensor([values], dtype=torch.long)
    if spec.text.strip():
        if not spec.tokenizer:
            raise InvalidInputError("text needs a tokenizer folder", site="discharge panel: tokenizer",
                                    remedy="Give a local folder holding tokenizer.json (nothing is downloaded).")
        from tracer.bridges.transformers import encode_text

        ids, _mask = encode_text(spec.text, spec.tokenizer)  # ids only: the structure side is captured on ids
        return ids
    _, config = _model_class(spec.config)
    shape = parse_shape(spec.input_shape)
    gen = torch.Generator().manual_seed(int(spec.seed))
    return torch.randint(0, int(getattr(config, "vocab_size", 2)), shape, generator=gen)


def _model_class(config_name: str) -> tuple[Any, Any]:
    import transformers

    from tracer.bridges.transformers import load_config, model_class_for

    config = load_config(str(resolve_config(config_name)))
    return (model_class_for(config) or transformers.AutoModelForCausalLM), config


def _config_param_count(config_name: str) -> int:
    import torch

    cls, config = _model_class(config_name)
    make = getattr(cls, "_from_config", None) or cls.from_config
    with torch.device("meta"):
        model = make(config)
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def _torch_dtype(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise InvalidInputError(f"dtype {name!r} is not one of {', '.join(DTYPES)}", site="discharge panel: dtype")
    return getattr(torch, name)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"
