"""`trace()`: admit the model and inputs, capture one forward, return a Trace."""
from __future__ import annotations

import contextlib
import platform
import sys
import time
from dataclasses import replace
from typing import Any, Callable, ContextManager, Mapping, Sequence

import torch
from torch import nn

from .distributed.admission import admit_distributed
from .capture import boundaries, compiled, gaps, higher_order
from .capture.build import build_ops, build_trace, live_calls
from .capture.collector import assembling, fewer_collections
from .capture.exclusive import exclusive_capture
from .capture.guards import chain
from .capture.session import CallGuard, CaptureSession, outer_suspended
from .capture.walk import iter_tensors, named_modules, params_and_buffers
from .claims.envelope import seal_new_envelope
from .claims.twin import describe_twin
from .errors import InvalidInputError
from .ir import Trace
from .options import CaptureOptions
from .provenance import Findings
from .weights_free import known_buffers
from .weights_free.admission import admit_structure_only, refuse_fake_or_functional
from .witness import capture_scope


def trace(
    model: nn.Module,
    args: Any = (),
    input_kwargs: Mapping[str, Any] | None = None,
    *,
    capture: CaptureOptions = CaptureOptions(),
    loss: Callable[[Any], torch.Tensor] | None = None,
    tokenizer: Any = None,
) -> Trace:
    """Capture `model(*args, **input_kwargs)` into a Trace; the model's own output is `trace.output`.

    A single tensor for `args` is treated as one positional input; text (a string or a list of
    strings) is tokenized with `tokenizer` as `tracer.bridges.transformers.trace_text` does. With
    `CaptureOptions(backward=True)` (or a `loss`), the backward of `loss(output)` (default: the
    output's sum) runs after the forward and is recorded in `trace.backward`.
    Called from inside a captured forward, the outer capture records the inner forward's ops (they are
    computation of the outer forward) and none of this capture's own work.
    """
    if tokenizer is not None or isinstance(args, str) or (isinstance(args, (list, tuple)) and args
                                                          and isinstance(args[0], str)):
        from .bridges.transformers import text_trace

        return text_trace(model, args, tokenizer, capture, loss, input_kwargs)
    with outer_suspended(), _kernel(capture):
        return _trace(model, args, input_kwargs, capture, loss)


def _kernel(capture: CaptureOptions) -> ContextManager[Any]:
    """The capture kernel `capture.kernel` asks for, held while the capture runs ("auto": as configured)."""
    if not isinstance(capture, CaptureOptions) or capture.kernel == "auto":
        return contextlib.nullcontext()
    from .capture.kernel import use_kernel

    return use_kernel(capture.kernel)


def _trace(model: nn.Module, args: Any, input_kwargs: Mapping[str, Any] | None, capture: CaptureOptions,
           loss: Callable[[Any], torch.Tensor] | None) -> Trace:
    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"trace() needs an nn.Module, got {type(model).__name__}", site="trace(model=...)")
    if not isinstance(capture, CaptureOptions):
        raise InvalidInputError(f"capture must be a CaptureOptions, got {type(capture).__name__}", site="trace(capture=...)")
    args_t = _as_args(args)
    kwargs = dict(input_kwargs or {})
    model, unwrapped = compiled.unwrap(model)  # a torch.compile wrapper: its original module (disclosed)
    walked = named_modules(model, remove_duplicate=False)  # once per capture: linear at any nesting depth
    # real buffers of a meta model: meta copies with known values for this capture, put back after it
    with known_buffers.swapped_for_meta(walked, capture) as given_buffers:
        return _trace_walked(model, args_t, kwargs, capture, loss, walked, unwrapped, given_buffers)


def _trace_walked(model: nn.Module, args_t: tuple, kwargs: dict, capture: CaptureOptions, loss: Any,
                  walked: list, unwrapped: Any, given_buffers: list) -> Trace:
    state = params_and_buffers(model, modules=walked)  # read by each admission below, walked once
    distributed = admit_distributed(model, args_t, kwargs, modules=walked, state=state,  # None outside a process group
                                    structure_only=capture.structure_only,
                                    backward=capture.backward or loss is not None)
    guard: CallGuard | None = None
    admission: dict[str, Any] = {"mode": "eager"}
    refuse_fake_or_functional(args_t, kwargs, state)  # they compute no values: nothing real to record
    any_meta = _any_meta(args_t, kwargs, state)
    given = (args_t, kwargs)  # the caller's inputs (structure-only admission may give the forward meta copies)
    if not capture.structure_only and any_meta and _offloaded(model):
        admission = {"mode": "eager", "offload": "accelerate"}  # meta params with offload-hook evidence
    elif capture.structure_only or any_meta:
        guard, admission, (args_t, kwargs) = admit_structure_only(model, args_t, kwargs, capture, state=state,
                                                                  given_buffers=given_buffers)
    twin = describe_twin(model, *given, modules=walked)  # what a discharge preflight compares (tracer.claims)
    save_values = capture.save != "none" and not capture.structure_only
    backward = _backward_recorder(capture, loss)
    session = CaptureSession(model, save_values=save_values, record_source=capture.record_source,
                             guard=chain(guard, distributed), modules=walked)
    saving = contextlib.nullcontext()
    if backward is not None:
        backward = backward(session, capture.save_grads, replay=capture.backward_replay)
        session.guard = chain(guard, distributed, backward.guard)
        saving = backward.saving()
    grad_context = torch.no_grad() if capture.inference_only else contextlib.nullcontext()
    started = time.perf_counter()
    # simulate_device: the session's own mode answers the model's device reads, or (beside a witness census,
    # whose mode sits between) a second function mode does
    device_reads = guard.device_reads(model, None if capture.witness else session) if guard is not None \
        else contextlib.nullcontext()
    # The heap as it was stays frozen from the forward to the sealed trace (capture.collector): collections
    # triggered by the records, ops and claims walk only what this capture made.
    with fewer_collections():
        with exclusive_capture(model, walked), capture_scope(model, session, witness=capture.witness) as scope, \
                saving, device_reads, compiled.eager_regions() as stance:
            try:
                output = session.run(args_t, kwargs, grad_context)  # bridges + witness installed around the forward
            except Exception as exc:
                higher_order.refuse_failed_forward(session, exc)  # typed where a HOP gave the forward another structure
                raise
        elapsed = time.perf_counter() - started
        with assembling():  # the trace built with the GC paused, then moved out of the young generation
            compiled_found = (unwrapped, compiled.compiled_submodules(walked), stance)
            return _assemble(session, output, elapsed, scope, model, capture, admission, twin, guard, distributed,
                             backward, loss, compiled_found)


def _assemble(session: CaptureSession, output: Any, elapsed: float, scope: Any, model: nn.Module,
              capture: CaptureOptions, admission: dict, twin: Any, guard: Any, distributed: Any, backward: Any,
              loss: Any, compiled_found: tuple = (None, [], None)) -> Trace:
    """The one Trace of a finished forward: ops, the backward when asked, findings, then the envelope."""
    ops = build_ops(session)
    if distributed is not None:  # layouts, local shapes and collectives onto the ops (tracer.distributed)
        ops = distributed.annotate(ops)
    backward_pass = backward.run(output, loss, ops, model) if backward is not None else None
    findings = Findings()  # every part reports here; the trace is then built once
    calls = scope.report(ops, live_calls(session, ops), findings)  # bridges + witness
    higher_order.mark(session)  # torch.cond, while_loop, map, flex attention: one boundary op each
    boundaries.report(ops, session, findings)  # foreign-kernel boundary ops
    compiled.disclose(findings, *compiled_found)  # torch.compile regions run as their eager graph
    gaps.report(ops, session, findings)  # parameters read by no op, an output no op produced
    if session.fast_paths:  # fused kernels the plain forward runs and capture could not (warned in the session)
        findings.add(fast_paths={f["address"]: f for f in session.fast_paths})
    if distributed is not None:
        distributed.report(findings)
    provenance = findings.provenance(**_provenance(model, capture, admission, elapsed), twin=twin)
    result = build_trace(session, ops, save=capture.save, provenance=provenance, output=output,
                         warnings=tuple(findings.warnings), calls=calls)
    if distributed is not None:
        result = distributed.localize(result, model)  # DTensor parameter layouts; values as local shards
    if guard is not None:  # the evidence envelope is sealed from the built structure (HYPOTHESIS)
        result = result.with_envelope(seal_new_envelope(result))
    if backward_pass is not None:
        result = replace(result, backward=backward_pass, _children=None)
    return result


def _backward_recorder(capture: CaptureOptions, loss: Any) -> Any:
    """The backward recorder class when a backward is asked for (refused typed where it cannot run)."""
    if not capture.backward and loss is None:
        return None
    if loss is not None and not callable(loss):
        raise InvalidInputError(f"loss must be a callable from the model's output to a scalar, not {type(loss).__name__}",
                                site="trace(loss=...)", remedy="loss=lambda out: out.logits.sum()")
    if capture.inference_only:
        raise InvalidInputError("a backward cannot run after an inference-only capture", site="trace(capture=...)",
                                remedy="Drop inference_only=True to capture the backward.")
    from .backward.capture import BackwardRecorder

    return BackwardRecorder


def _offloaded(model: nn.Module) -> bool:
    """True when accelerate hooks load every meta tensor (raises typed when one has none)."""
    from .bridges.accelerate import offload_evidence

    return offload_evidence(model) is not None


def _as_args(args: Any) -> tuple:
    if isinstance(args, torch.Tensor):
        return (args,)
    if isinstance(args, (list, tuple)):
        return tuple(args)
    raise InvalidInputError(
        f"args must be a tensor, a tuple or a list, got {type(args).__name__}",
        site="trace(args=...)",
        remedy="Pass positional inputs as a tuple, keyword inputs as input_kwargs={...}.",
    )


def _any_meta(args: Sequence[Any], kwargs: Mapping[str, Any], state: tuple[list, list]) -> bool:
    if any(t.is_meta for table in state for _, t in table):
        return True
    return any(t.is_meta for _, t in iter_tensors([list(args), dict(kwargs)]))


def _provenance(model: nn.Module, capture: CaptureOptions, admission: dict, elapsed: float) -> dict[str, Any]:
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    tf = sys.modules.get("transformers")
    if tf is not None:
        versions["transformers"] = getattr(tf, "__version__", "?")
    return {
        "model_class": type(model).__name__,
        "model_module": type(model).__module__,
        "options": capture.describe(),
        "structure_only": bool(capture.structure_only),
        "admission": admission,
        "versions": versions,
        "capture_seconds": round(elapsed, 6),
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
