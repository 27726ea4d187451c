"""The GPU campaign (issue 38 item 8): one script, one run of at most 8 minutes on a single H200.

    python tests/gpu/campaign.py --out tests/gpu/campaign_results.json   # on a CUDA machine
    python tests/gpu/campaign.py --write-docs                            # results file -> docs/deployment.md rows
    python tests/gpu/campaign.py --dry-run                               # the plan, nothing run or written

Every model is built from a config with random weights (nothing is downloaded). Each check is a function
of the device and a size, so tests/gpu/test_campaign.py runs the CPU-capable bodies at tiny sizes in CI;
without CUDA every check is recorded as skipped. The results file is turned into the rows of
docs/deployment.md by tests/gpu/campaign_rows.py (no results file: the rows say "not run").
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SCHEMA = "torchlens-explore.gpu-campaign/1"
RESULTS = ROOT / "tests" / "gpu" / "campaign_results.json"
BUDGET_S = 450.0  # checks not started by then are recorded as skipped (the run stays inside 8 minutes)
LLAMA_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0)
LLAMA_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
LLAMA_SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=4, vocab_size=1024, max_position_embeddings=256)


@dataclass(frozen=True)
class Check:
    """One campaign check: its name, what it runs in words (the docs row), and its body `(ctx) -> numbers`."""

    name: str
    what: str
    run: Callable[["Context"], dict[str, Any]]
    needs: tuple[str, ...] = ("cuda",)


class Context:
    """What the checks share: the device, the sizes, and the 8B model between its two checks."""

    def __init__(self, device: str, big: dict[str, Any], small: dict[str, Any], seq: int = 16) -> None:
        self.device, self.big, self.small, self.seq = device, big, small, seq
        self.cache: dict[str, Any] = {}

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()


class CheckFailed(AssertionError):
    """A check ran and found something other than what the ledger says (the numbers travel with it)."""

    def __init__(self, message: str, numbers: dict[str, Any]) -> None:
        super().__init__(message)
        self.numbers = numbers


def expect(condition: bool, message: str, numbers: dict[str, Any]) -> None:
    if not condition:
        raise CheckFailed(message, numbers)


# -- builders -----------------------------------------------------------------------------------
def llama(size: dict[str, Any], device: str, dtype: torch.dtype, attn: str = "sdpa") -> torch.nn.Module:
    """A LlamaForCausalLM of `size` with seeded random weights, built directly on `device` in `dtype`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**size, attn_implementation=attn, architectures=["LlamaForCausalLM"])
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    return model.eval()


def saved_small_llama(ctx: Context) -> Path:
    """The small Llama saved once (safetensors) to a temporary folder, for the from_pretrained paths."""
    if "saved" not in ctx.cache:
        folder = Path(tempfile.mkdtemp(prefix="campaign-llama-"))
        llama(ctx.small, "cpu", torch.float32).save_pretrained(folder)
        ctx.cache["saved"] = folder
    return ctx.cache["saved"]


def ids_for(model: torch.nn.Module, ctx: Context) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (1, ctx.seq), generator=gen)
    return ids.to(next(model.parameters()).device)


def bare(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def traced(model: torch.nn.Module, ids: torch.Tensor, **options: Any) -> Any:
    import warnings

    import tracer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracer.trace(model, (ids,), capture=tracer.CaptureOptions(inference_only=True, **options))


def validation(trace: Any) -> dict[str, Any]:
    """Validate; the outcome as numbers, a typed refusal named by its code."""
    import tracer
    from tracer.errors import TracerError

    start = time.perf_counter()
    try:
        report = tracer.validate(trace)
    except TracerError as exc:
        return {"validate": f"refused {exc.code}", "validate_s": round(time.perf_counter() - start, 2)}
    findings = report.to_dict()["findings"]
    return {"validate": "passed" if report else "failed", "findings": len(findings),
            "first_finding": findings[0]["label"] if findings else None,
            "validate_s": round(time.perf_counter() - start, 2)}


# -- the checks ------------------------------------------------------------------------------------
def check_llama_bf16(ctx: Context) -> dict[str, Any]:
    start = time.perf_counter()
    model = llama(ctx.big, ctx.device, torch.bfloat16)
    built = time.perf_counter() - start
    ids = ids_for(model, ctx)
    plain = bare(model, ids)
    start = time.perf_counter()
    t = traced(model, ids)
    ctx.sync()
    numbers = {"params": t.param_count(), "ops": len(t), "build_s": round(built, 2),
               "capture_s": round(time.perf_counter() - start, 2), "output_equal": bool(torch.equal(t.output.logits, plain)),
               "devices": sorted({op.out.device for op in t.ops if op.out is not None})}
    del plain
    numbers.update(validation(t))
    if ctx.device.startswith("cuda"):
        numbers["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    ctx.cache["big"] = (model, ids)
    expect(numbers["output_equal"] and numbers["validate"] == "passed", "capture or validation differs", numbers)
    return numbers


def check_overhead(ctx: Context, repeats: int = 5) -> dict[str, Any]:
    """Capture (save='none') against the bare forward on the same model, interleaved, medians with spread."""
    model, ids = ctx.cache.get("big") or (llama(ctx.big, ctx.device, torch.bfloat16), None)
    ids = ids if ids is not None else ids_for(model, ctx)

    def forward() -> None:
        bare(model, ids)
        ctx.sync()

    def capture() -> None:
        traced(model, ids, save="none")
        ctx.sync()

    times: dict[str, list[float]] = {"forward": [], "capture": []}
    for fn in (forward, capture):
        fn()  # warm
    for _ in range(repeats):
        for name, fn in (("forward", forward), ("capture", capture)):
            gc.collect()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"forward_ms": round(med["forward"] * 1e3, 2), "capture_ms": round(med["capture"] * 1e3, 2),
            "ratio": round(med["capture"] / med["forward"], 2), "repeats": repeats,
            "forward_ms_range": [round(min(times["forward"]) * 1e3, 2), round(max(times["forward"]) * 1e3, 2)],
            "capture_ms_range": [round(min(times["capture"]) * 1e3, 2), round(max(times["capture"]) * 1e3, 2)]}


def check_device_map_auto(ctx: Context) -> dict[str, Any]:
    from transformers import LlamaForCausalLM

    import tracer

    ctx.cache.pop("big", None)
    gc.collect()
    model = LlamaForCausalLM.from_pretrained(saved_small_llama(ctx), device_map="auto", dtype=torch.bfloat16).eval()
    ids = ids_for(model, ctx)
    plain = bare(model, ids)
    t = traced(model, ids)
    report = tracer.doctor(model, (ids,))
    numbers = {"device_map": sorted({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()}),
               "output_equal": bool(torch.equal(t.output.logits, plain)), "doctor": report.keys()}
    numbers.update(validation(t))
    expect(numbers["output_equal"] and numbers["validate"] == "passed" and "accelerate.dispatch" in numbers["doctor"],
           "device_map='auto' capture, validation or doctor row differs", numbers)
    return numbers


def _bnb(ctx: Context, bits: int) -> dict[str, Any]:
    from transformers import BitsAndBytesConfig, LlamaForCausalLM

    import tracer

    quant = BitsAndBytesConfig(load_in_8bit=True) if bits == 8 else BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    model = LlamaForCausalLM.from_pretrained(saved_small_llama(ctx), quantization_config=quant,
                                             device_map={"": ctx.device}, dtype=torch.bfloat16).eval()
    ids = ids_for(model, ctx)
    plain = bare(model, ids)
    t = traced(model, ids)
    key = "bitsandbytes.int8" if bits == 8 else "bitsandbytes.4bit"
    numbers = {"output_equal": bool(torch.equal(t.output.logits, plain)), "verified": t.provenance.verified,
               "doctor_row": key in tracer.doctor(model, (ids,)).keys()}
    numbers.update(validation(t))
    ledger = "refused trace_invariant_violated" if bits == 8 else "failed"  # the CPU ledger's disclosed degradation
    numbers["as_ledger"] = numbers["validate"] == ledger
    expect(numbers["output_equal"] and numbers["doctor_row"], f"{bits}-bit capture or doctor row differs", numbers)
    return numbers


def check_bnb_8bit(ctx: Context) -> dict[str, Any]:
    return _bnb(ctx, 8)


def check_bnb_4bit(ctx: Context) -> dict[str, Any]:
    return _bnb(ctx, 4)


def check_sdpa_kernels(ctx: Context) -> dict[str, Any]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = llama(ctx.small, ctx.device, torch.bfloat16, attn="sdpa")
    ids = ids_for(model, ctx)
    numbers: dict[str, Any] = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        with sdpa_kernel([backend]):  # only this kernel may run: a fallback would raise
            plain = bare(model, ids)
            t = traced(model, ids)
            outcome = validation(t)
        numbers[backend.name.lower()] = {"output_equal": bool(torch.equal(t.output.logits, plain)), **outcome}
    expect(all(v["output_equal"] and v["validate"] == "passed" for v in numbers.values()),
           "a pinned sdpa kernel's capture or validation differs", numbers)
    return numbers


def check_graphed_callables(ctx: Context) -> dict[str, Any]:
    import tracer

    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).to(ctx.device)
    graphed = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).to(ctx.device)
    sample = torch.randn(8, 64, device=ctx.device)
    graphed = torch.cuda.make_graphed_callables(graphed, (sample,))
    graphed_row = tracer.doctor(graphed).row("cuda.graphs")
    numbers = {"graphed_applies": graphed_row.applies, "detail": graphed_row.detail,
               "plain_cuda_applies": tracer.doctor(plain).row("cuda.graphs").applies}
    g = torch.cuda.CUDAGraph()
    static = torch.randn(8, 64, device=ctx.device)
    with torch.no_grad():
        plain(static)  # warm (library handles are made outside the capture)
    torch.cuda.synchronize()
    with torch.no_grad(), torch.cuda.graph(g):
        numbers["inside_stream_capture_applies"] = tracer.doctor(plain).row("cuda.graphs").applies
        plain(static)
    expect(numbers["graphed_applies"] and not numbers["plain_cuda_applies"]
           and numbers["inside_stream_capture_applies"], "the cuda.graphs row does not fire exactly", numbers)
    return numbers


CHECKS: tuple[Check, ...] = (
    Check("llama_8b_bf16", "Llama-3.1-8B-class config (4096 hidden, 32 layers, GQA 32/8, 128,256 vocab), random "
          "bf16 weights on one CUDA device, sdpa: capture output equal to the bare forward, `tracer.validate` passes",
          check_llama_bf16),
    Check("capture_overhead", "the same 8B model: capture (`save='none'`) time over the bare CUDA forward, "
          "interleaved, medians of 5 with their ranges", check_overhead),
    Check("device_map_auto", "a small Llama saved with random weights, `from_pretrained(device_map='auto')` on one "
          "GPU: output equal, validation passes, the `accelerate.dispatch` row applies", check_device_map_auto),
    Check("bitsandbytes_8bit", "the small Llama loaded in 8-bit (bitsandbytes CUDA kernels): output equal, the "
          "`bitsandbytes.int8` row applies, validation outcome against the CPU ledger's", check_bnb_8bit),
    Check("bitsandbytes_4bit", "the small Llama loaded in 4-bit: output equal, the `bitsandbytes.4bit` row applies, "
          "validation outcome against the CPU ledger's", check_bnb_4bit),
    Check("sdpa_kernels", "the small Llama in bf16 with sdpa pinned to the flash and then the memory-efficient "
          "kernel (`torch.nn.attention.sdpa_kernel`): output equal, validation passes under each",
          check_sdpa_kernels),
    Check("make_graphed_callables", "a module through `torch.cuda.make_graphed_callables`: the `cuda.graphs` row "
          "applies to it and inside an active stream capture, not to the same module un-graphed on CUDA",
          check_graphed_callables),
)


# -- running ---------------------------------------------------------------------------------------
def versions() -> dict[str, Any]:
    found: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "cuda": torch.version.cuda}
    for name in ("transformers", "accelerate", "bitsandbytes"):
        try:
            found[name] = __import__(name).__version__
        except Exception:  # not installed, or broken on this machine: the row says so
            found[name] = None
    found["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return found


def run_check(check: Check, ctx: Context, started: float, budget_s: float) -> dict[str, Any]:
    """One check's result row: pass, fail, error (with its exception) or skipped (with why)."""
    row: dict[str, Any] = {"name": check.name, "what": check.what}
    if "cuda" in check.needs and not ctx.device.startswith("cuda"):
        return {**row, "status": "skipped", "detail": "no CUDA device"}
    if time.perf_counter() - started > budget_s:
        return {**row, "status": "skipped", "detail": f"the run's {budget_s:.0f} s budget was spent"}
    start = time.perf_counter()
    try:
        numbers = check.run(ctx)
        row.update(status="pass", numbers=numbers)
    except CheckFailed as exc:
        row.update(status="fail", detail=str(exc), numbers=exc.numbers)
    except Exception as exc:  # a check that broke is a row, not a crashed campaign
        row.update(status="error", detail=f"{type(exc).__name__}: {exc}"[:400],
                   trace=traceback.format_exc(limit=4)[-1500:])
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def run(names: list[str] | None = None, device: str | None = None, budget_s: float = BUDGET_S,
        big: dict[str, Any] | None = None, small: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the checks (all, or `names`) and return the results document."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    ctx = Context(device, big or LLAMA_8B, small or LLAMA_SMALL)
    started = time.perf_counter()
    chosen = [c for c in CHECKS if names is None or c.name in names]
    rows = [run_check(check, ctx, started, budget_s) for check in chosen]
    return {"schema": SCHEMA, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": device,
            "versions": versions(), "seconds": round(time.perf_counter() - started, 1), "checks": rows}


def plan() -> dict[str, Any]:
    """What a run would do, without running anything."""
    return {"schema": SCHEMA, "cuda_available": torch.cuda.is_available(), "budget_s": BUDGET_S,
            "checks": [{"name": c.name, "what": c.what, "needs": list(c.needs)} for c in CHECKS]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--out", type=Path, help=f"write the results JSON here (e.g. {RESULTS.relative_to(ROOT)})")
    parser.add_argument("--only", help="comma-separated check names (default: all)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="start no check after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run and write nothing")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite docs/deployment.md's GPU campaign rows from the results file")
    args = parser.parse_args(argv)
    if args.dry_run:
        print(json.dumps(plan(), indent=2))
        return 0
    if args.write_docs:
        from tests.gpu.campaign_rows import write_docs

        print(write_docs(args.out or RESULTS))
        return 0
    names = [n.strip() for n in args.only.split(",")] if args.only else None
    unknown = sorted(set(names or ()) - {c.name for c in CHECKS})
    if unknown:
        parser.error(f"unknown checks {unknown}; known: {[c.name for c in CHECKS]}")
    results = run(names, budget_s=args.budget_s)
    text = json.dumps(results, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0 if all(r["status"] in ("pass", "skipped") for r in results["checks"]) else 1


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
