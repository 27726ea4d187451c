"""Typed refusals. Every error has a stable `code`, the offending `site` and a `remedy`.

Codes are part of the public contract (listed in docs/errors.md, checked by a test);
`findings` carries structured details a program can read.
"""
from __future__ import annotations

from typing import Any


class TracerError(Exception):
    """Base of every refusal raised by tracer. `code` is stable; `site` says where."""

    code: str = "tracer_error"
    default_remedy: str = ""

    def __init__(
        self,
        message: str,
        *,
        site: str | None = None,
        remedy: str | None = None,
        code: str | None = None,
        **findings: Any,
    ) -> None:
        if code is not None:
            self.code = code
        self.message = message
        self.site = site
        self.findings = findings
        super().__init__()
        self.remedy = remedy if remedy is not None else self.default_remedy  # renders the message (below)

    @property
    def remedy(self) -> str:
        """The remedy that applies; setting it (a refusal that learns a better one) re-renders the message."""
        return self._remedy

    @remedy.setter
    def remedy(self, value: str) -> None:
        self._remedy = value
        self.args = (self._render(),)

    def __str__(self) -> str:
        return self._render()  # the message, site and remedy as they are now

    def _render(self) -> str:
        text = f"[{self.code}] {self.message}"
        if self.site:
            text += f"\n  at: {self.site}"
        if self.remedy:
            text += f"\n  remedy: {self.remedy}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "site": self.site,
            "remedy": self.remedy,
            "findings": {k: _plain(v) for k, v in self.findings.items()},
        }


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    return repr(value)


# -- families -------------------------------------------------------------------
class ViewerUnavailableError(TracerError):
    """No installed package provides the view asked for (tracer itself draws nothing)."""

    code = "viewer_unavailable"
    default_remedy = "Install the explorer with tracer: pip install torchlens-explore (it registers the views)."


class AdmissionError(TracerError):
    """The model or inputs cannot be captured in the requested mode."""

    code = "admission_refused"


class CaptureError(TracerError):
    """Capture itself could not proceed (not the user's forward raising)."""

    code = "capture_failed"


class StoreError(TracerError):
    """A trace file could not be written or was refused on load."""

    code = "trace_file_invalid"


class ClaimError(TracerError):
    """A claim-ladder operation was refused."""

    code = "claim_refused"


class ValidationFailedError(TracerError):
    """Forward replay found an op that does not reproduce."""

    code = "validation_failed"


# -- admission ----------------------------------------------------------------------
class InvalidInputError(AdmissionError):
    code = "invalid_input"
    default_remedy = "Pass the model an nn.Module and its positional inputs as a tuple or list."


class ConfigNotFoundError(InvalidInputError):
    code = "config_not_found"
    default_remedy = "Use a shipped config name (tracer.configs.shipped_configs()) or a local config JSON."


class ConfigInvalidError(InvalidInputError):
    code = "config_invalid"
    default_remedy = 'A config JSON needs `model_type` and an `architectures` entry naming a transformers class.'


class TokenizerNotFoundError(InvalidInputError):
    code = "tokenizer_not_found"
    default_remedy = "Pass a tokenizer object, or a local folder holding tokenizer.json (nothing is downloaded)."


class MetaStateWithoutFlagError(AdmissionError):
    code = "meta_state_without_structure_only"
    default_remedy = (
        "A meta-device model has no values to capture. Use "
        "trace(..., capture=CaptureOptions(structure_only=True)) or tracer.summary(model)."
    )


class RealStateWithStructureOnlyError(AdmissionError):
    code = "structure_only_on_real_state"
    default_remedy = (
        "Structure-only capture needs a weights-free model: build it from its config under "
        "torch.device('meta') (e.g. AutoModelForCausalLM.from_config(cfg) inside "
        "`with torch.device('meta'):`) and pass meta inputs, or drop structure_only for an "
        "eager capture of the real model."
    )


class MixedSubstrateError(AdmissionError):
    code = "mixed_substrate"
    default_remedy = "Put every parameter, buffer and input on the meta device, or none of them."


class RealTensorInStructureCaptureError(AdmissionError):
    code = "real_tensor_mid_forward"
    default_remedy = (
        "The forward created a tensor on a real device. Create it on the device of an input "
        "(device=x.device) so a meta capture stays on meta."
    )


class MetaKernelUnavailableError(AdmissionError):
    code = "meta_kernel_unavailable"
    default_remedy = (
        "A kernel in the forward has no meta implementation for these inputs (or refuses them on meta), so a "
        "structure-only capture cannot go past it. Capture a small real twin eagerly, or choose a model "
        "setting that avoids the kernel (another attention or experts implementation, another dtype)."
    )


class ValueDependentBranchError(AdmissionError):
    code = "value_dependent_branch"
    default_remedy = (
        "The forward reads a tensor's value, which a structure-only capture does not have. If the value "
        "comes from an input, pass that input as a real tensor (its values are then known); otherwise avoid "
        "the value read, or capture the real model eagerly."
    )


class UnsupportedTensorStateError(AdmissionError):
    code = "unsupported_tensor_state"
    default_remedy = "Capture a plain dense model; fake, functional, sparse and quantized tensors are refused."


class DistributedCaptureUnsupportedError(AdmissionError):
    code = "distributed_capture_unsupported"
    default_remedy = "Capture the unsharded model (load it without tp_plan / device_mesh) on one process."


class SimulatedMeshError(InvalidInputError):
    code = "simulated_mesh_invalid"
    default_remedy = ("Choose tp dividing the attention and key/value head counts, world_size = tp x fsdp, and call "
                      "tracer.distributed.simulate outside any real process group.")


class DistributedGatherError(InvalidInputError):
    code = "distributed_gather_unavailable"
    default_remedy = "Call tracer.distributed.gather(trace) on every rank of an initialized process group."


class OffloadEvidenceMissingError(AdmissionError):
    code = "meta_parameter_without_offload_hook"
    default_remedy = (
        "A parameter is on the meta device but no accelerate offload hook will load it. "
        "Load the model with its weights, or capture structure-only."
    )


class PaddedPromptError(AdmissionError):
    code = "padded_prompt_unsupported"
    default_remedy = (
        "A structure-only text capture keeps an all-ones attention mask on meta; it cannot represent "
        "padding. Trace one prompt at a time (or equal-length prompts), or pass input ids only."
    )


class BackwardFailedError(CaptureError):
    """The backward of a captured forward raised (the loss, or a kernel without a backward)."""

    code = "backward_failed"


class ConcurrentCaptureError(CaptureError):
    code = "model_already_capturing"
    default_remedy = (
        "Capture one model from one thread at a time: wait for the other capture to finish, or capture a "
        "copy of the model (copy.deepcopy) on the second thread."
    )


# -- claims ---------------------------------------------------------------------------
class DischargePreflightError(ClaimError):
    code = "twins_not_comparable"
    default_remedy = "Capture the real twin from the same config, versions, mode and input plan."


class SimulatedDeviceMismatchError(DischargePreflightError):
    code = "simulated_device_mismatch"
    default_remedy = ("Recapture the weights-free trace with CaptureOptions(structure_only=True, "
                      "simulate_device=<the twin's device>), or capture the twin on the simulated device.")


class SimulatedDeviceRuntimeError(AdmissionError):
    code = "simulated_device_runtime_missing"
    default_remedy = ("The model queries the simulated device's runtime (e.g. torch.cuda.get_device_capability), "
                      "which this process lacks: simulate a device this machine has (simulate_device='cpu'), or "
                      "capture where that runtime exists.")


class NotCorroboratedError(ClaimError):
    code = "claims_not_corroborated"
    default_remedy = "Discharge the structure-only trace against a real capture first: trace.discharge_against(real)."


class StructureOnlyMeasurementsError(ClaimError):
    code = "structure_only_measurements_unsupported"
    default_remedy = "Measurements need values: capture the real model eagerly."


class NotStructureOnlyError(ClaimError):
    code = "not_structure_only"
    default_remedy = "Claims and plans belong to structure-only traces: capture with CaptureOptions(structure_only=True)."


class EnvelopeTamperedError(StoreError):
    code = "envelope_digest_mismatch"
    default_remedy = "The evidence envelope was changed after it was sealed; recapture the trace."


# -- store ----------------------------------------------------------------------------
class TraceFileNotFoundError(StoreError):
    code = "trace_file_missing"


class TraceFileCorruptError(StoreError):
    code = "trace_file_corrupt"
    default_remedy = "The file is truncated or not a trace; save the trace again."


class TraceFileTamperedError(StoreError):
    code = "trace_digest_mismatch"
    default_remedy = "The file's contents do not match its digest; it was edited or damaged. Save the trace again."


class TraceSchemaError(StoreError):
    code = "trace_schema_unsupported"
    default_remedy = "This file was written by another format or version of torchlens-explore."


class TraceStructureInvalidError(TraceFileCorruptError):
    code = "trace_structure_invalid"
    default_remedy = ("A record of the trace has the wrong type or refers to something that is not there; the "
                      "file was edited or written by a broken tool. Save the trace again.")


class TraceLimitError(TraceFileCorruptError):
    code = "trace_limit_exceeded"
    default_remedy = ("A size, depth or count in the file is beyond this build's limits (tracer/store/format.py: "
                      "e.g. modules nested deeper than 512, JSON values nested deeper than 64); it is refused.")


class TraceFileUnsafeError(StoreError):
    code = "trace_file_unsafe"
    default_remedy = "Trace files must be regular files inside the trace folder (links may not leave it); copy the files in."


class TraceSavePathError(StoreError):
    code = "trace_save_path_invalid"
    default_remedy = ("Pass a folder path that is new, empty or an earlier trace folder (a trace is saved as a folder "
                      "holding trace.json and values.safetensors).")


class TraceSaveFailedError(StoreError):
    code = "trace_save_failed"
    default_remedy = "Nothing was changed at the target; free space or fix permissions and save again."


# -- validation ------------------------------------------------------------------------
class StructureOnlyValidationError(ValidationFailedError):
    code = "structure_only_not_replayable"
    default_remedy = "Structure-only traces hold no values; validate a real capture (save='all')."


class ValuesMissingError(ValidationFailedError):
    code = "values_not_saved"
    default_remedy = "Replay needs saved values: capture with CaptureOptions(save='all')."


# -- replay validation
class DistributedReplayUnsupportedError(ValidationFailedError):
    code = "distributed_replay_unsupported"
    default_remedy = ("Replaying a sharded trace would issue its collectives on one rank alone; check it with "
                      "tracer.distributed.validate_rank(trace) on each rank.")


class ReplayUnavailableError(ValidationFailedError):
    code = "live_calls_missing"
    default_remedy = "Replay needs the live calls of a trace captured in this process; trace the model again."


class ValidationScopeError(ValidationFailedError):
    code = "validation_scope_unsupported"
    default_remedy = "Validate with scope='forward' (the only scope replayed today)."


class TraceInvariantError(ValidationFailedError):
    code = "trace_invariant_violated"
    default_remedy = (
        "The trace's structure disagrees with what ran (see findings). A quantized or patched module "
        "computes from tensors outside its parameters; do not treat this trace as an exact record."
    )


class ForeignKernelNotReplayableError(ValidationFailedError):
    code = "foreign_kernel_not_replayable"
    default_remedy = (
        "A numpy or DLPack round trip ran outside torch and cannot be replayed. Wrap it in a "
        "torch.autograd.Function or a torch.library custom op so replay can call it again."
    )


class ReplayMismatchError(ValidationFailedError):
    code = "replay_mismatch"
    default_remedy = "An op did not reproduce from its recorded parents; see the report's first failing op."

def all_error_classes() -> list[type[TracerError]]:
    """Every TracerError class defined here, base first (for docs and tests)."""
    seen: list[type[TracerError]] = []
    stack: list[type[TracerError]] = [TracerError]
    while stack:
        cls = stack.pop(0)
        if cls not in seen:
            seen.append(cls)
            stack.extend(cls.__subclasses__())
    return seen


def errors_markdown() -> str:
    """docs/errors.md: every error code with its class, family and default remedy."""
    lines = [
        "# Error codes",
        "",
        "Every refusal raised by torchlens-explore is a `tracer.errors.TracerError` with a stable `code`,",
        "the offending `site` and a `remedy`; `err.findings` holds structured details and `err.to_dict()`",
        "a JSON form. Classes live next to their layer (`tracer.errors`, `exporters.errors`, `app.errors`).",
        "Codes never change meaning; new ones are added here. This page is generated by",
        "`python -m tracer.errors_doc tracer exporters app` and checked by `tests/tracer/test_errors_doc.py`.",
        "",
        "| code | class | family | default remedy |",
        "|---|---|---|---|",
    ]
    for cls in all_error_classes():
        family = _family(cls)
        doc = (cls.default_remedy or (cls.__doc__ or "").strip()).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{cls.code}` | `{cls.__name__}` | {family} | {doc} |")
    return "\n".join(lines) + "\n"


def _family(cls: type[TracerError]) -> str:
    """The family a class belongs to: its ancestor directly below TracerError ("-" for the families themselves)."""
    if cls is TracerError or TracerError in cls.__bases__:
        return "-"
    return next(b.__name__ for b in cls.__mro__ if TracerError in b.__bases__)


# -- diff and compare ------------------------------------------------------------------
class DiffInputError(InvalidInputError):
    code = "diff_input_invalid"
    default_remedy = "Pass two tracer.Trace objects (tracer.trace(...) or tracer.load(path)) and a tolerance >= 0."


class CompareTwinError(InvalidInputError):
    code = "compare_twin_unsupported"
    default_remedy = ("Pass against= a dtype (torch.bfloat16, 'bf16', 'fp16'), an attention backend ('eager', 'sdpa'), "
                      "'lora-merged' for a peft model, 'int8' for bitsandbytes 8-bit, or a second nn.Module.")


class CompareTwinUnavailableError(CompareTwinError):
    code = "compare_twin_unavailable"
    default_remedy = "This twin needs an optional package or device that is not present; install it or pick another twin."


class DiffFileNotFoundError(StoreError):
    code = "diff_file_missing"
    default_remedy = "Pass the JSON file written by TraceDiff.save(path)."


class DiffFileCorruptError(StoreError):
    code = "diff_file_corrupt"
    default_remedy = "The file is truncated, not a diff, or a record in it is malformed; compute and save the diff again."


class DiffFileTamperedError(StoreError):
    code = "diff_digest_mismatch"
    default_remedy = "The diff's contents do not match its digest; it was edited or damaged. Save the diff again."


class DiffSchemaError(StoreError):
    code = "diff_schema_unsupported"
    default_remedy = "This file was written by another format or version of torchlens-explore; save the diff again."


class DiffSavePathError(StoreError):
    code = "diff_save_path_invalid"
    default_remedy = "Pass a file path ending in .json whose folder can be written; an existing non-diff file is left alone."


# -- bounded reads of user files (tracer.bounded_io) ------------------------------------
class InputNotRegularFileError(InvalidInputError):
    code = "input_not_regular_file"
    default_remedy = "Pass a regular file: a FIFO, a device (or a link to one), a socket or a folder is not read."


class InputTooLargeError(InvalidInputError):
    code = "input_too_large"
    default_remedy = "The file is larger than this input may be (or inflates past its bound); pass the file it should be."


class InputUnreadableError(InvalidInputError):
    code = "input_unreadable"
    default_remedy = "The file cannot be opened or read (permissions, a broken link, corrupt compression); check the path."


# -- files written by exporters and the CLI (tracer.atomic_write) ------------------------
class OutputPathUnsafeError(InvalidInputError):
    code = "output_path_unsafe"
    default_remedy = ("The output path is a symbolic link (or not a regular file); pass another path, or "
                      "--follow-symlinks to write through the link.")


# -- the ladder's seal (tracer.claims.seal) -----------------------------------------------
class EnvelopeNotMintedError(ClaimError):
    code = "envelope_not_minted"
    default_remedy = ("Only trace.discharge_against(real) raises or refutes a trace: discharge it in this process and "
                      "attach result.envelope to the trace it was discharged for.")


class EnvelopeBoundElsewhereError(ClaimError):
    code = "envelope_bound_to_other_trace"
    default_remedy = ("An envelope belongs to the trace whose claims it holds: attach each trace's own envelope, or "
                      "discharge this trace against its real twin.")


class EnvelopeFieldLockedError(ClaimError):
    code = "envelope_field_locked"
    default_remedy = ("evolve records facts about the capture; the ladder state, the discharge record, the claims and "
                      "the history change only through discharge_against (a discharged envelope takes plan audits only).")


class EnvelopeClaimsMismatchError(EnvelopeTamperedError):
    code = "envelope_claims_mismatch"
    default_remedy = "The saved envelope's claims do not describe the saved records; recapture and save the trace again."


# -- higher-order ops under capture (tracer.capture.higher_order) ------------------------
class HigherOrderOpError(CaptureError):
    code = "higher_order_op_unsupported"
    default_remedy = (
        "torch's map higher-order op returns its flat outputs when it runs eagerly under a capture, not the "
        "structure the plain forward gets, so the captured forward is not the plain one. Write the loop as a "
        "Python loop (or torch.vmap) for the capture, or capture the body module on one slice."
    )
