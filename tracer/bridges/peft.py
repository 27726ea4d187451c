"""PEFT adapters: what a doctor row and a test need to know about a wrapped model."""
from __future__ import annotations

from typing import Any

from torch import nn


def adapter_info(model: nn.Module) -> dict[str, Any] | None:
    """The adapters of a PEFT model (type, names, adapter module and parameter addresses), or None."""
    config = getattr(model, "peft_config", None)
    if not config:
        return None
    modules = [addr for addr, m in model.named_modules() if type(m).__module__.startswith("peft.tuners")
               and any(True for _ in m.children())]
    names = sorted(config)
    params = [addr for addr, _ in model.named_parameters() if any(f".{n}." in f".{addr}." for n in names)]
    types = sorted({str(getattr(c, "peft_type", "?")).split(".")[-1] for c in config.values()})
    return {"adapters": names, "types": types, "adapted_modules": modules, "adapter_params": params}
