"""What a capture (or a refusal) must leave as it was, as plain data that compares with ==."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as nn_module

from tracer.capture import boundaries


def snapshot(model: nn.Module) -> dict:
    """Hooks, flags, parameter/buffer identity, placement and version, module attributes, torch globals."""
    return {
        "hooks": [(name, dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._forward_hooks_with_kwargs),
                   set(m._forward_hooks_always_called), dict(m._forward_pre_hooks_with_kwargs),
                   dict(m._backward_hooks)) for name, m in model.named_modules()],
        "training": [(name, m.training) for name, m in model.named_modules()],
        "params": [(name, id(p), type(p).__name__, str(p.device), p.dtype, p.requires_grad, p._version)
                   for name, p in model.named_parameters()],
        "buffers": [(name, id(b), str(b.device), b.dtype, b._version) for name, b in model.named_buffers()],
        "forward": [(name, m.forward) for name, m in model.named_modules()],
        "attrs": [(name, sorted(vars(m))) for name, m in model.named_modules()],
        "global_hooks": (dict(nn_module._global_forward_hooks), dict(nn_module._global_forward_pre_hooks)),
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "dtype": torch.get_default_dtype(),
        "default_device": str(torch.get_default_device()),
        "fn_modes": torch._C._len_torch_function_stack(),
        "function_apply": boundaries.apply_is_torchs(),  # torch's, or the pass-through installed once
    }


def values(model: nn.Module) -> list[torch.Tensor]:
    """Copies of every parameter and buffer value (real tensors only)."""
    return [t.detach().clone() for t in [*model.parameters(), *model.buffers()] if not t.is_meta]


def assert_unchanged(before: dict, after: dict) -> None:
    """Compare two snapshots key by key, so a failure names what changed."""
    for key in before:
        assert before[key] == after[key], key
