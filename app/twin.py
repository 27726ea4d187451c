"""The real twin behind a discharge: what the user asked for, what it costs, and capturing it.

The app only orchestrates: the model comes from transformers, the capture from `tracer.trace`,
the comparison from `structure_trace.discharge_against(real_trace)`.
"""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from tracer.errors import DischargePreflightError, InvalidInputError
from tracer.estimates import dtype_bytes
from tracer.provenance import plain_data

from .config_check import build_checked, read_config
from .errors import TokenIdOutOfRangeError, TwinTooLargeError
from .limits import current as current_limits
from .sources import parse_shape, resolve_config, token_shape

DTYPES = ("float32", "bfloat16", "float16")
ATTENTION = ("eager", "sdpa")
HEADROOM = 0.8  # use at most this share of the memory the kernel says is available
OVERHEAD = 1.2  # allocator and framework overhead over the raw estimate

Progress = Callable[[float, str], None]
_INIT_LOCK = threading.Lock()  # weight init draws from torch's global generator: one forked draw at a time


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


@dataclass(frozen=True)
class StructureFacts:
    """What the twin's checks need from the structure-only trace, small enough to hand to a child as JSON."""

    claimed_twin: dict
    param_count: int
    activation_bytes: int
    float_dtype: str

    def to_dict(self) -> dict[str, Any]:
        return {"claimed_twin": self.claimed_twin, "param_count": self.param_count,
                "activation_bytes": self.activation_bytes, "float_dtype": self.float_dtype}


def structure_facts(structure: Any) -> StructureFacts:
    """The facts of `structure` (a trace) for `preflight` and `estimate` (a `StructureFacts` passes through)."""
    if isinstance(structure, StructureFacts):
        return structure
    from tracer.estimates import trace_totals

    dtype = next((op.out.dtype for op in structure.ops if op.out is not None and op.out.dtype.startswith(("float", "bfloat"))),
                 "float32")
    return StructureFacts(claimed_twin=plain_data(claimed_twin(structure)), param_count=structure.param_count(),
                          activation_bytes=int(trace_totals(structure)["activation_bytes_estimate"]), float_dtype=dtype)



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


def claimed_twin(structure: Any) -> dict[str, Any]:
    """The twin descriptor the structure-only trace recorded (empty when it has none)."""
    env = getattr(structure, "envelope", None)
    twin = getattr(env, "twin", None) or structure.provenance.get("twin") or {}
    return dict(twin)


def twin_input_shape(spec: TwinSpec) -> tuple[int, ...] | None:
    """The shape of the twin's token ids, known before building (None for text: known once tokenized)."""
    if spec.ids.strip():
        return (1, len(_explicit_ids(spec)))
    if spec.text.strip():
        return None
    return token_shape(parse_shape(spec.input_shape))


def preflight(spec: TwinSpec, structure: Any) -> Any:
    """Check the twin is comparable with the structure before anything is built; returns its config.

    Compares the architecture, the config fingerprint, the attention backend and the input shape
    with what the structure recorded; refuses `twins_not_comparable` naming each difference.
    """
    from tracer.claims.twin import config_fingerprint

    config = checked_config(spec.config)
    claimed = structure_facts(structure).claimed_twin
    if not claimed:
        return config
    mismatches = []
    arch = (getattr(config, "architectures", None) or [None])[0]
    if arch and claimed.get("model_class") and arch != claimed["model_class"]:
        mismatches.append({"field": "model_class", "structure": claimed["model_class"], "real": arch})
    if claimed.get("config_fingerprint") and config_fingerprint(config) != claimed["config_fingerprint"]:
        mismatches.append({"field": "config_fingerprint", "structure": claimed["config_fingerprint"],
                           "real": config_fingerprint(config)})
    if claimed.get("attn_implementation") and spec.attn != claimed["attn_implementation"]:
        mismatches.append({"field": "attn_implementation", "structure": claimed["attn_implementation"], "real": spec.attn})
    shape = twin_input_shape(spec)
    recorded = [list(x[1]) for x in claimed.get("inputs", [])]
    if shape is not None and recorded and recorded[0] != list(shape):
        mismatches.append({"field": "inputs", "structure": recorded[0], "real": list(shape)})
    if mismatches:
        names = ", ".join(m["field"] for m in mismatches)
        raise DischargePreflightError(f"the twins are not comparable: {names} differ (checked before building the twin)",
                                      site="discharge panel", mismatches=mismatches,
                                      remedy="Describe the twin the structure was captured from: the same config, "
                                             "attention backend and input shape.")
    return config


def estimate(spec: TwinSpec, structure: Any) -> MemoryEstimate:
    """Weights (parameters x dtype bytes) plus the structure's activations scaled to the twin's input shape.

    `structure` is the trace or its `StructureFacts`. The parameter count is the structure's when the
    twin's config is the one it was captured from; otherwise the config's model is counted on the
    meta device (within the declared limits).
    """
    from tracer.claims.twin import config_fingerprint

    facts = structure_facts(structure)
    config = checked_config(spec.config)
    same = facts.claimed_twin.get("config_fingerprint") == config_fingerprint(config)
    params = facts.param_count if same else _config_param_count(spec.config)
    act = facts.activation_bytes * dtype_bytes(spec.dtype) / max(dtype_bytes(facts.float_dtype), 1)
    recorded = [x[1] for x in facts.claimed_twin.get("inputs", [])]
    shape = twin_input_shape(spec)
    if shape is not None and recorded and _elements(recorded[0]):
        act = act * _elements(shape) / _elements(recorded[0])
    return MemoryEstimate(params, params * dtype_bytes(spec.dtype), int(act), available_memory())


def _elements(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


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


def checked_capture(spec: TwinSpec, structure: Any, progress: Progress) -> Any:
    """Preflight, estimate, refuse if too big, then build and capture the twin (`structure`: trace or facts)."""
    progress(0.02, "checking the twin is comparable")
    preflight(spec, structure)
    progress(0.05, "estimating memory")
    check_fits(estimate(spec, structure), spec)
    return capture_twin(spec, progress)


def discharge(structure: Any, spec: TwinSpec, progress: Progress) -> tuple[Any, Any]:
    """Check, capture the twin in this process and discharge; returns (report, real trace).

    Neither trace changes: the report carries the new envelope.
    """
    real = checked_capture(spec, structure, progress)
    return _join(structure, real, progress), real


def discharge_copy(structure: Any, spec: TwinSpec, progress: Progress) -> tuple[Any, Any]:
    """`discharge` with the checks, the build and the capture in a child process (the server's
    interpreter stays free for other sessions); returns (report, new envelope) for the session to
    apply on its own thread."""
    real = capture_isolated(spec, structure, progress)
    report = _join(structure, real, progress)
    return report, report.envelope


def capture_isolated(spec: TwinSpec, structure: Any, progress: Progress) -> Any:
    """`checked_capture` in a child process (`app.worker`, task "twin"); the real trace comes back as
    a saved folder and is loaded here (typed refusals re-raised)."""
    import tracer

    from . import tempdirs
    from .worker import run_task

    out = tempdirs.make("tlx-twin-")
    try:
        run_task("twin", {"spec": asdict(spec), "facts": structure_facts(structure).to_dict(),
                          "out": str(out / "real")}, progress, site="discharge panel")
        return tracer.load(str(out / "real"))
    finally:
        tempdirs.remove(out)


def estimate_isolated(spec: TwinSpec, structure: Any, progress: Progress) -> MemoryEstimate:
    """`estimate` in a child process (reading the config and counting a model's parameters may take a while)."""
    from .worker import run_task

    data = run_task("estimate", {"spec": asdict(spec), "facts": structure_facts(structure).to_dict()}, progress,
                    site="discharge panel: estimate")
    return MemoryEstimate(**data)


def _join(structure: Any, real: Any, progress: Progress) -> Any:
    progress(0.85, "discharging the claims")
    report = structure.discharge_against(real)
    progress(1.0, f"done: {report.state}")
    return report


def build_twin(spec: TwinSpec) -> Any:
    """The twin model on CPU: `from_pretrained` of a local folder, or `from_config` seeded."""
    import torch

    dtype = _torch_dtype(spec.dtype)
    cls, config = _model_class(spec.config)
    path = resolve_config(spec.config)
    if spec.checkpoint:
        folder = Path(spec.checkpoint).expanduser()
        if not folder.is_dir():
            raise InvalidInputError(f"no checkpoint folder at {spec.checkpoint!r}", site="discharge panel: checkpoint",
                                    remedy="Give a local folder written by save_pretrained, or leave it empty for random weights.")
        model = build_checked(path, "loading the checkpoint", lambda: cls.from_pretrained(
            str(folder), dtype=dtype, attn_implementation=spec.attn, local_files_only=True))
    else:
        make = getattr(cls, "_from_config", None) or cls.from_config
        with _INIT_LOCK, torch.random.fork_rng(devices=[]):  # the global generator is restored after
            torch.manual_seed(int(spec.seed))
            model = build_checked(path, "building the twin", lambda: make(config, dtype=dtype, attn_implementation=spec.attn))
    return model.eval()


def twin_inputs(spec: TwinSpec) -> Any:
    """Token ids from explicit ids, from text through a local tokenizer, or seeded random ids."""
    import torch

    _, config = _model_class(spec.config)
    vocab = int(getattr(config, "vocab_size", 2) or 2)
    if spec.ids.strip():
        ids = torch.tensor([_explicit_ids(spec)], dtype=torch.long)
    elif spec.text.strip():
        if not spec.tokenizer:
            raise InvalidInputError("text needs a tokenizer folder", site="discharge panel: tokenizer",
                                    remedy="Give a local folder holding tokenizer.json (nothing is downloaded).")
        from tracer.bridges.transformers import encode_text

        ids, _mask = encode_text(spec.text, spec.tokenizer)  # ids only: the structure side is captured on ids
    else:
        shape = token_shape(parse_shape(spec.input_shape))
        gen = torch.Generator().manual_seed(int(spec.seed))  # a private generator: the global one is untouched
        return torch.randint(0, vocab, shape, generator=gen)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        bad = int(ids.max()) if int(ids.max()) >= vocab else int(ids.min())
        raise TokenIdOutOfRangeError(f"token id {bad} is outside the vocabulary 0..{vocab - 1}",
                                     site="discharge panel: ids",
                                     remedy=f"Use ids from 0 to {vocab - 1}, or a tokenizer made for this config.")
    return ids


def _explicit_ids(spec: TwinSpec) -> list[int]:
    try:
        values = [int(v) for v in spec.ids.replace(",", " ").split()]
    except ValueError:
        raise InvalidInputError(f"token ids {spec.ids[:80]!r} are not integers", site="discharge panel: ids",
                                remedy="Write ids separated by commas or spaces, e.g. 1, 2, 3.") from None
    current_limits().check("input_elements", len(values), "the number of token ids", "discharge panel: ids")
    return values


def checked_config(config_name: str) -> Any:
    """The twin's transformers config, read within the declared limits and refused typed when unusable."""
    path = resolve_config(config_name)
    read_config(path)
    from tracer.bridges.transformers import load_config

    return build_checked(path, "reading the config with transformers", lambda: load_config(str(path)))


def _model_class(config_name: str) -> tuple[Any, Any]:
    import transformers

    from tracer.bridges.transformers import model_class_for

    config = checked_config(config_name)
    return (model_class_for(config) or transformers.AutoModelForCausalLM), config


def _config_param_count(config_name: str) -> int:
    import torch

    cls, config = _model_class(config_name)
    make = getattr(cls, "_from_config", None) or cls.from_config
    with torch.device("meta"):
        model = build_checked(resolve_config(config_name), "counting parameters on the meta device",
                              lambda: make(config))
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
