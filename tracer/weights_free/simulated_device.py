"""The simulated device of a weights-free capture: the model sees a real device, every tensor stays on meta.

Model code that branches on a tensor's device (`x.device.type in ("cpu", "mps")`, `x.is_cuda`) takes
the branch it would take on the simulated device, so the hypothesis describes the computation a
real twin on that device runs. Two parts:

- `read` / `call`: the capture's own function mode answers `Tensor.device`,
  `is_cpu`/`is_cuda`/`is_meta`/`is_mps`/`is_xpu` and `get_device()` of meta tensors with the simulated
  device (reads are metadata: they are never recorded), and runs the calls it does not record as the
  device would. `reads` wraps the forward (a runtime query refused typed); beside a witness census,
  whose mode sits between, it pushes a second function mode that answers them instead.
- `on_meta`: used by the structure-only guard; a call whose device arguments name the simulated
  device (`device="cpu"`, `.to(torch.device("cpu"))`, `.cpu()`) runs with meta in their place, so
  nothing real is made; the op is recorded as the model made it.
"""
from __future__ import annotations

import contextlib
import sys
import traceback
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from ..errors import InvalidInputError, SimulatedDeviceRuntimeError, TracerError

META = torch.device("meta")
_BASE = torch._C.TensorBase
_FLAGS = {_BASE.is_cpu: "cpu", _BASE.is_cuda: "cuda", _BASE.is_meta: "meta", _BASE.is_mps: "mps",
          _BASE.is_xpu: "xpu"}  # getset descriptors -> the device type each flag tests
_GETTER = type(_BASE.device.__get__)  # how torch hands a property read to a function mode (method-wrapper)
_MOVES = frozenset({"cpu", "cuda", "mps", "xpu"})  # Tensor methods that move to a device type by name
_DEVICE_ARGS = frozenset({"to", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"})
_NAMES_DEVICE = _MOVES | _DEVICE_ARGS  # kinds that can name a device without a `device=` keyword
_GET_DEVICE = _BASE.get_device


def parse_simulated_device(value: Any) -> str | None:
    """The canonical text of a `simulate_device` option (`"cpu"`, `"cuda:0"`), or None; refuses typed."""
    if value is None:
        return None
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"simulate_device={value!r} is not a device: {exc}", site="CaptureOptions(simulate_device=...)",
                                remedy="simulate_device='cpu' (or 'cuda', 'cuda:1', 'mps'), or None to let the model see meta.") from None
    if device.type == "meta":
        raise InvalidInputError("simulate_device='meta' simulates nothing", site="CaptureOptions(simulate_device=...)",
                                remedy="simulate_device=None lets the model see meta; name a real device otherwise.")
    return str(_indexed(device))


def _indexed(device: torch.device) -> torch.device:
    """A device as a tensor on it reports itself (`cuda` -> `cuda:0`; cpu has no index)."""
    if device.type == "cpu" or device.index is not None:
        return device
    return torch.device(device.type, 0)


class SimulatedDevice:
    """One simulated device: what meta tensors report, and which device arguments go to meta."""

    def __init__(self, device: str) -> None:
        self.device = _indexed(torch.device(device))
        self.type = self.device.type
        self.index = -1 if self.type == "cpu" else self.device.index

    # -- reads ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def reads(self, model: nn.Module, *, mode: bool = True) -> Iterator[None]:
        """For the duration: `model`'s forward sees the simulated device on meta tensors, and a call
        that asks the device's runtime itself is refused typed.

        With `mode`, a function mode answers the reads: entered by a root pre-hook, so it sits inside the
        capture's own mode (reads answered here never reach the recorder), and left by an always-called
        root hook. Without, the capture's own mode answers them (`read`, `call`): one mode, not two.
        """
        if not mode:
            with self._runtime_refused():
                yield
            return
        reads = _DeviceReads(self)
        depth = [0]

        def enter(_m: nn.Module, _args: tuple) -> None:
            depth[0] += 1
            if depth[0] == 1:
                reads.__enter__()

        def leave(_m: nn.Module, _args: tuple, _out: Any) -> None:
            depth[0] -= 1
            if depth[0] == 0:
                reads.__exit__(None, None, None)

        handles = [model.register_forward_pre_hook(enter), model.register_forward_hook(leave, always_call=True)]
        try:
            with self._runtime_refused():
                yield
        finally:
            for h in handles:
                h.remove()
            if depth[0] > 0:  # the forward never reached its post-hook
                reads.__exit__(None, None, None)

    @contextlib.contextmanager
    def _runtime_refused(self) -> Iterator[None]:
        """A failure inside the device's runtime (torch.cuda, torch.mps, torch.xpu) raised typed."""
        try:
            yield
        except Exception as exc:
            runtime = None if isinstance(exc, TracerError) or self.type == "cpu" else _runtime_call(exc)
            if runtime is None:
                raise
            raise SimulatedDeviceRuntimeError(
                f"the model asked the {self.type} runtime itself ({runtime[0]}) about the simulated device "
                f"{str(self.device)!r}, and this process has no {self.type} runtime: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else ''}",
                site=runtime[1], call=runtime[0], simulated_device=str(self.device)) from exc

    def read(self, func: Any, args: tuple) -> Any:
        """The simulated answer (never None) when `func` reads the device of a meta tensor for the model,
        else None. Called from a function mode's `__torch_function__`: the frame that called `func` is two
        up (looked at only for a read; the tracer's own reads see meta)."""
        if type(func) is not _GETTER and func is not _GET_DEVICE:
            return None
        answer = self.answer(func, args)
        return None if answer is _NOT_A_READ or _read_by_tracer(sys._getframe(2)) else answer

    def call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run a call as the model on the simulated device would: inside torch.vmap (where the capture runs
        calls unguarded) device arguments naming it go to meta, and a 0-dim real tensor beside meta ones
        moves to meta when the kernel refuses it (an autograd Function's forward also runs unguarded)."""
        if _in_transform() is not None:
            on_meta = self.on_meta(getattr(func, "__name__", ""), func, args, kwargs)
            if on_meta is not None:
                return on_meta(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except RuntimeError:
            moved = _scalars_on_meta(args, kwargs)
            if moved is None:
                raise
            return func(*moved[0], **moved[1])

    def answer(self, func: Any, args: tuple) -> Any:
        """The simulated answer to a device read of a meta tensor, or `_NOT_A_READ`."""
        if type(func) is not _GETTER:  # a device read is a property getter, or get_device()
            return self.index if func is _GET_DEVICE and _is_meta(args) else _NOT_A_READ
        owner = func.__self__
        if owner is _BASE.device:
            return self.device if _is_meta(args) else _NOT_A_READ
        flag = _FLAGS.get(owner)
        if flag is not None:
            return self.type == flag if _is_meta(args) else _NOT_A_READ
        return _NOT_A_READ

    # -- arguments ------------------------------------------------------------------------------
    def names_it(self, value: Any) -> bool:
        """True when `value` (a device, a device string, or a cuda index) names the simulated device."""
        if isinstance(value, torch.device):
            return value.type == self.type and (value.index is None or value.index == self.device.index
                                                or self.type == "cpu")
        if isinstance(value, str):
            try:
                return self.names_it(torch.device(value))
            except (RuntimeError, ValueError):
                return False
        if isinstance(value, int) and not isinstance(value, bool):
            return self.type == "cuda" and value == self.device.index
        return False

    def _names_positional(self, value: Any) -> bool:
        """A positional argument after the tensor that names the simulated device (an int there is not a device)."""
        return not isinstance(value, int) and self.names_it(value)

    def on_meta(self, kind: str, func: Callable, args: tuple, kwargs: dict) -> Callable | None:
        """`func` with its device arguments that name the simulated device put on meta, or None
        when the call names no device (always for a kind outside _NAMES_DEVICE without a `device=` keyword)."""
        if kind not in _NAMES_DEVICE and (not kwargs or kwargs.get("device") is None):
            return None  # no device argument: the common call, answered without looking further
        if kind in _MOVES and args and isinstance(args[0], Tensor) and args[0].is_meta:
            if kind == self.type:  # x.cpu() while simulating the cpu: the tensor stays where it is
                return lambda *a, **k: a[0].to(META)
            return None
        device = kwargs.get("device") if kwargs else None
        mapped_kwargs = kwargs
        if device is not None and self.names_it(device):
            mapped_kwargs = {**kwargs, "device": META}
        mapped_args = args
        if kind in _DEVICE_ARGS and any(self._names_positional(a) for a in args[1:]):  # x.to(torch.float32): none
            mapped_args = (*args[:1], *(META if self._names_positional(a) else a for a in args[1:]))
        if mapped_args is args and mapped_kwargs is kwargs:
            return None
        return lambda *_a, **_k: func(*mapped_args, **mapped_kwargs)

    def common_case(self) -> tuple:
        """What the capture's C hook reads in place of `read` and `on_meta` (`_hotpath.device_read`,
        `names_device`): the kinds that move to a device by name, those that may take one positionally,
        the types that may name one, the answers to each device read of a meta tensor, a property getter's
        type and get_device. A call that may name the device goes to the Python hook."""
        answers = {_BASE.device: self.device, _GET_DEVICE: self.index,
                   **{flag: self.type == kind for flag, kind in _FLAGS.items()}}
        return _MOVES, _DEVICE_ARGS, (torch.device, str), answers, _GETTER, _GET_DEVICE

    def describe(self) -> dict[str, Any]:
        return {"device": str(self.device), "type": self.type}


_NOT_A_READ = object()


def _runtime_call(exc: BaseException) -> tuple[str, str | None] | None:
    """(the device-runtime function, the model's line that called it) when `exc` came out of
    `torch.cuda`/`torch.mps`/`torch.xpu`; else None."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    for i, (frame, _line) in enumerate(frames):
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[:2] in (["torch", "cuda"], ["torch", "mps"], ["torch", "xpu"]):
            caller = next(((f, n) for f, n in reversed(frames[:i]) if not
                           f.f_globals.get("__name__", "").startswith(("torch.", "tracer."))), None)
            site = f"{caller[0].f_code.co_filename}:{caller[1]} in {caller[0].f_code.co_name}" if caller else None
            return f"{module}.{frame.f_code.co_name}", site
    return None


def _is_meta(args: tuple) -> bool:
    return bool(args) and isinstance(args[0], Tensor) and args[0].is_meta


class _DeviceReads(TorchFunctionMode):
    """Answers device reads of meta tensors with the simulated device; every other call passes through
    (the mode of a capture whose own function mode does not answer them: a witness census runs)."""

    def __init__(self, simulated: SimulatedDevice) -> None:
        super().__init__()
        self.simulated = simulated

    def __torch_function__(self, func, types, args=(), kwargs=None):
        answer = self.simulated.read(func, args)
        if answer is not None:
            return answer
        return self.simulated.call(func, args, kwargs or {})


_in_transform = torch._C._functorch.peek_interpreter_stack  # None outside torch.vmap / torch.func


def _scalars_on_meta(args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """`args`/`kwargs` with their 0-dim real tensors on meta, when meta tensors are among them; else None."""
    top = [*args, *kwargs.values()]
    if not any(isinstance(a, Tensor) and a.is_meta for a in top):
        return None
    if not any(isinstance(a, Tensor) and not a.is_meta and a.dim() == 0 for a in top):
        return None

    def moved(a: Any) -> Any:
        return a.to(META) if isinstance(a, Tensor) and not a.is_meta and a.dim() == 0 else a

    return tuple(moved(a) for a in args), {k: moved(v) for k, v in kwargs.items()}


def _read_by_tracer(frame: Any) -> bool:
    """True when the capture itself reads the device (a boundary op recorded while this mode is on the
    stack, as `Function.apply`'s pass-through does): it must see meta, as the model must not."""
    return frame is not None and frame.f_globals.get("__name__", "").startswith("tracer.")
