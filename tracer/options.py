"""Capture options (frozen, so a trace can record exactly what it was made with)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Union

SavePolicy = Union[Literal["all", "none"], Callable[[Any], bool]]


@dataclass(frozen=True)
class CaptureOptions:
    """How `tracer.trace` captures a forward.

    save: "all" keeps every op's output value, "none" keeps structure only (no activation
        is held past its use in the forward, so peak memory is the plain forward's), or a
        callable `op -> bool` choosing per op (it sees the finished `Op` record; values are
        held until the capture ends, then the unchosen ones are dropped).
    inference_only: run under `torch.inference_mode`; no autograd graph is kept.
    structure_only: capture a weights-free model on the meta device (no values exist).
    simulate_device: during a structure-only capture, the device the model sees (default "cpu"):
        meta tensors report it (`x.device`, `x.is_cpu`, `x.get_device()`) and device arguments naming
        it (`device="cpu"`, `.to("cpu")`, `.cpu()`) run on meta, so code that branches on the device
        takes the branch a real twin on that device takes. Recorded in the trace; a discharge against
        a twin on another device type refuses (`simulated_device_mismatch`). None: the model sees
        meta. Ignored by eager captures.
    record_source: record the model-code line of each call.
    witness: run a dispatch-level census beside the capture (completeness check).
    backward: after the forward, run the backward of a loss (`trace(..., loss=fn)`, default: the
        output's sum) and record it in `trace.backward` (`tracer.backward.BackwardPass`).
    save_grads: which op-output gradients the backward keeps: "all", "none" or a callable `op -> bool`.
    backward_replay: keep the autograd graph and every node's incoming and outgoing gradients, so
        `tracer.backward.validate_backward(trace)` can replay each node (memory: the graph stays alive).
    kernel: which capture kernel records the forward, for debugging: "auto" (the C kernel where it is
        built, else the Python reference), "python" or "c" (refused typed where the C kernel is off). A
        chosen kernel holds for the whole process while this capture runs (`tracer.capture.kernel.use_kernel`)
        and is recorded in the trace's options; both kernels record the same trace.
    """

    save: SavePolicy = "all"
    inference_only: bool = False
    structure_only: bool = False
    simulate_device: Any = "cpu"
    record_source: bool = True
    witness: bool = False
    backward: bool = False
    save_grads: SavePolicy = "all"
    backward_replay: bool = False
    kernel: str = "auto"

    def __post_init__(self) -> None:
        if not (self.save in ("all", "none") or callable(self.save)):
            from .errors import InvalidInputError

            raise InvalidInputError(
                f"save must be 'all', 'none' or a callable, not {self.save!r}",
                remedy="CaptureOptions(save='all'), save='none' or save=lambda op: op.kind == 'linear'",
            )

        if self.kernel not in ("auto", "python", "c"):
            from .errors import InvalidInputError

            raise InvalidInputError(f"kernel must be 'auto', 'python' or 'c', not {self.kernel!r}",
                                    site="CaptureOptions(kernel=...)", remedy="CaptureOptions(kernel='python')")
        if self.simulate_device != "cpu":  # normalized ("cuda" -> "cuda:0"); refused typed when not a device
            from .weights_free.simulated_device import parse_simulated_device

            object.__setattr__(self, "simulate_device", parse_simulated_device(self.simulate_device))

    def describe(self) -> dict[str, Any]:
        """A JSON-able record of these options (a callable is named, not stored)."""
        save = self.save if isinstance(self.save, str) else f"callable:{getattr(self.save, '__name__', 'fn')}"
        return {
            "save": save,
            "inference_only": self.inference_only,
            "structure_only": self.structure_only,
            **({"simulate_device": self.simulate_device} if self.structure_only else {}),
            "record_source": self.record_source,
            "witness": self.witness,
            **({"kernel": self.kernel} if self.kernel != "auto" else {}),
            **({"backward": True, "backward_replay": self.backward_replay, "save_grads": self.save_grads if isinstance(self.save_grads, str) else
                f"callable:{getattr(self.save_grads, '__name__', 'fn')}"} if self.backward else {}),
        }
