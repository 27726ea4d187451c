"""Refusals of the explorer app (its inputs and its twin), next to the app; documented in docs/errors.md."""
from __future__ import annotations

from tracer.errors import AdmissionError, CaptureError, InvalidInputError, TracerError


class SourceNotFoundError(AdmissionError):
    code = "source_not_found"
    default_remedy = "Pass a saved trace, a config JSON (or a folder holding config.json), or a shipped config name."


class InvalidInputShapeError(AdmissionError):
    code = "invalid_input_shape"
    default_remedy = "Write the input shape as comma-separated positive integers, e.g. 1,8."


class InvalidModelSpecError(AdmissionError):
    code = "invalid_model_spec"
    default_remedy = "Write --model as package.module:factory (a function returning an nn.Module), importable from here."


class FeatureUnavailableError(AdmissionError):
    code = "feature_unavailable"
    default_remedy = "This build lacks the part that does this; open a saved trace or your own model instead."


class TwinTooLargeError(AdmissionError):
    code = "twin_exceeds_memory"
    default_remedy = "Pick a smaller config or dtype (bfloat16 halves float32), a shorter input, or a machine with more memory."


class LimitExceededError(AdmissionError):
    code = "limit_exceeded"
    default_remedy = "Use a smaller input, or raise the named limit: torchlens-explore --limit NAME=VALUE."


class ModelFactoryError(AdmissionError):
    code = "model_factory_failed"
    default_remedy = "Fix the factory so that calling it (and one forward on the given input shape) works in plain Python."


class PortUnavailableError(AdmissionError):
    code = "port_unavailable"
    default_remedy = "Pick another port between 1 and 65535, or leave --port out to take a free one."


class TokenIdOutOfRangeError(InvalidInputError):
    code = "token_id_out_of_range"
    default_remedy = "Use token ids from 0 to the config's vocab_size - 1, or a tokenizer made for this config."


class WorkerFailedError(CaptureError):
    code = "worker_failed"
    default_remedy = ("The child process doing this work stopped without an answer (killed, out of memory, or a bug); "
                      "the message quotes its last line. Try again, or run the same step from the command line.")


class NoTraceOpenError(InvalidInputError):
    code = "no_trace_open"
    default_remedy = "Open a trace first: the MCP tool open_trace with a saved trace path or a config name (llama-3.1-8b)."


class ShuttingDownError(TracerError):
    code = "shutting_down"
    default_remedy = "The explorer is stopping; nothing new is started. Start it again to go on."
