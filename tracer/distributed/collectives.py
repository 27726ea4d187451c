"""Which calls are collectives, and what each one moves: group ranks, payload and wire bytes.

Two APIs reach the capture's function mode: functional collectives (`torch.ops._c10d_functional.*`,
what DTensor redistribution and `funcol.*` issue) and the c10d API (`torch.distributed.all_reduce`
and friends), which hands itself to the active function mode before it runs.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..ir import Collective

# functional collective op name -> (collective, position of the group name, position of the reduce op or -1)
_FUNCOL = {
    "all_reduce": ("all_reduce", 2, 1), "all_reduce_": ("all_reduce", 2, 1),
    "all_reduce_coalesced": ("all_reduce", 2, 1), "all_reduce_coalesced_": ("all_reduce", 2, 1),
    "all_gather_into_tensor": ("all_gather", 2, -1), "all_gather_into_tensor_out": ("all_gather", 2, -1),
    "all_gather_into_tensor_coalesced": ("all_gather", 2, -1),
    "reduce_scatter_tensor": ("reduce_scatter", 3, 1), "reduce_scatter_tensor_coalesced": ("reduce_scatter", 3, 1),
    "all_to_all_single": ("all_to_all", 3, -1),
    "broadcast": ("broadcast", 2, -1), "broadcast_": ("broadcast", 2, -1),
}
_FUNCOL_NAMESPACES = ("torch.ops._c10d_functional.", "torch.ops._c10d_functional_autograd.")

# c10d function -> (collective, position of the input tensor, position of the reduce op or -1)
_C10D = {
    "all_reduce": ("all_reduce", 0, 1), "broadcast": ("broadcast", 0, -1), "reduce": ("reduce", 0, 2),
    "all_gather_into_tensor": ("all_gather", 1, -1), "all_gather_single": ("all_gather", 1, -1),
    "reduce_scatter_tensor": ("reduce_scatter", 1, 2), "reduce_scatter_single": ("reduce_scatter", 1, 2),
    "all_to_all_single": ("all_to_all", 1, -1),
}
_C10D_MODULE = "torch.distributed.distributed_c10d."
# c10d calls a capture cannot record (their results land in Python lists, or travel point to point):
# name -> the remedy's tensor form (or what to do instead). They are refused before they run.
_C10D_REFUSED = {
    "all_gather": "all_gather_into_tensor (one output tensor)", "all_gather_coalesced": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor (one input tensor)", "all_to_all": "all_to_all_single",
    "all_reduce_coalesced": "one all_reduce per tensor", "gather": "all_gather_into_tensor",
    "scatter": "broadcast, then slice", "send": "a collective", "recv": "a collective",
    "isend": "a collective", "irecv": "a collective", "batch_isend_irecv": "a collective",
}
REFUSED = "refused"  # collective_kind's api for a call in _C10D_REFUSED
_INPUT_NAMES = ("input", "input_tensor", "tensor")


def collective_kind(qualname: str) -> tuple[str, str] | None:
    """(api, c10d-or-funcol op name) when `qualname` names a recorded collective, else None."""
    for ns in _FUNCOL_NAMESPACES:
        if qualname.startswith(ns):
            name = qualname[len(ns):].split(".")[0]
            return ("funcol", name) if name in _FUNCOL else None
    if qualname.startswith(_C10D_MODULE):
        name = qualname[len(_C10D_MODULE):]
        return ("c10d", name) if name in _C10D else (REFUSED, name) if name in _C10D_REFUSED else None
    return None


def refusal(api: str, name: str, kwargs: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(message, state, remedy) when a collective call cannot be recorded: a list-form or point-to-point
    c10d call (its results land in a Python list, or in one peer), or an async c10d call (its result is
    written after the call returns, when Work.wait() runs, which the capture does not see)."""
    if api == REFUSED:
        return (f"torch.distributed.{name} is not recorded by a capture (its tensors travel in Python lists or "
                "point to point, which leave no op to record)", "list_or_p2p_collective",
                f"Use {_C10D_REFUSED[name]} in the captured forward, or a functional collective "
                "(torch.distributed._functional_collectives).")
    if api == "c10d" and kwargs.get("async_op"):
        return (f"torch.distributed.{name}(async_op=True) is not recorded by a capture: its result is written when "
                "Work.wait() runs, which the capture does not see", "async_collective",
                "Capture with async_op=False, or use a functional collective "
                "(torch.distributed._functional_collectives.*), whose wait the capture records.")
    return None


def c10d_functions() -> list[Any]:
    """The c10d collectives that write their result into a tensor argument (recorded as in-place ops)."""
    import torch.distributed.distributed_c10d as c10d

    return [getattr(c10d, name) for name in _C10D if hasattr(c10d, name)]


def describe_call(api: str, name: str, args: tuple, kwargs: Mapping[str, Any], estimated: bool = False) -> Collective:
    """The Collective one live call is: its group's ranks, its payload and ring wire bytes."""
    if api == "funcol":
        what, group_at, op_at = _FUNCOL[name]
        tensor = _first_tensor(args[0])
        group = _funcol_group(_arg(args, kwargs, group_at, "group_name"))
    else:
        what, input_at, op_at = _C10D[name]
        tensor = _arg(args, kwargs, input_at, *_INPUT_NAMES)
        group = _c10d_group(args, kwargs)
    reduce_op = _arg(args, kwargs, op_at, "reduce_op", "op") if op_at >= 0 else ""
    payload = _nbytes(tensor)
    return Collective(name=what, api=api, group=group, payload_bytes=payload,
                      wire_bytes=wire_bytes(what, payload, len(group)), reduce_op=_op_text(reduce_op),
                      estimated=estimated)


def wire_bytes(what: str, payload: int, size: int) -> int:
    """Bytes a ring algorithm sends from one rank (payload: this rank's input)."""
    if size <= 1:
        return 0
    if what == "all_reduce":
        return 2 * (size - 1) * payload // size
    if what == "all_gather":
        return (size - 1) * payload
    if what in ("reduce_scatter", "all_to_all"):
        return (size - 1) * payload // size
    return payload  # broadcast / reduce: the whole tensor passes each link once


def _arg(args: tuple, kwargs: Mapping[str, Any], position: int, *names: str) -> Any:
    for n in names:
        if n in kwargs:
            return kwargs[n]
    return args[position] if 0 <= position < len(args) else None


def _first_tensor(x: Any) -> Any:
    return x[0] if isinstance(x, (list, tuple)) and x else x


def _nbytes(t: Any) -> int:
    t = _first_tensor(t)
    try:
        return int(t.numel() * t.element_size())
    except Exception:
        return 0


def _op_text(op: Any) -> str:
    if op is None or op == "":
        return ""
    text = str(op)
    return text.rsplit(".", 1)[-1].lower()


def _funcol_group(name: Any) -> tuple[int, ...]:
    import torch.distributed as dist

    try:
        pg = dist.distributed_c10d._resolve_process_group(name)
        return tuple(dist.get_process_group_ranks(pg))
    except Exception:
        return ()


def _c10d_group(args: tuple, kwargs: Mapping[str, Any]) -> tuple[int, ...]:
    import torch.distributed as dist

    group = kwargs.get("group")
    if group is None:
        group = next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
    try:
        return tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
    except Exception:
        return ()
