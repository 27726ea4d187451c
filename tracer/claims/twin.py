"""The comparable-twins descriptor: what must match before two captures' claims can be joined.

Recorded in every trace's provenance (`Provenance.twin`) at capture time; the discharge
preflight compares the structure-only side's descriptor with the real side's, field by field.
"""
from __future__ import annotations

import copy
import sys
import weakref
from typing import Any, Mapping

import torch
from torch import nn

from .ambient import ambient_modes, wrap_generation
from ..capture.walk import first_visits, iter_tensors, named_modules
from ..digest import canonical_digest

# Config keys that say nothing about the graph (or are compared separately, like dtype).
_VOLATILE_CONFIG_KEYS = frozenset({
    "transformers_version", "_name_or_path", "dtype", "torch_dtype", "_commit_hash", "architectures",
    "_attn_implementation_autoset", "use_cache", "attn_implementation", "_attn_implementation",
})
MASK_KWARGS = ("attention_mask",)


def describe_twin(model: nn.Module, args: tuple, kwargs: Mapping[str, Any], *, modules: list | None = None) -> dict[str, Any]:
    """A JSON-able description of the capture's twin conditions (config, versions, modes, inputs, policies)."""
    config = getattr(model, "config", None)
    tf = sys.modules.get("transformers")
    walked = modules or named_modules(model, remove_duplicate=False)
    return {
        "model_class": type(model).__name__,
        "config_fingerprint": config_fingerprint(config),
        "versions": {"torch": torch.__version__,
                     "transformers": getattr(tf, "__version__", None) if tf is not None else None},
        "training_modules": [name for name, m in first_visits(walked)
                             if m.training],
        "inputs": [[path, list(t.shape), str(t.dtype).replace("torch.", "")]
                   for path, t in [*iter_tensors(list(args), "args"), *iter_tensors(dict(kwargs), "kwargs")]],
        "use_cache": _use_cache(config, kwargs),
        "attention_mask": _mask_policy(kwargs),
        "attn_implementation": getattr(config, "_attn_implementation", None) if config is not None else None,
        "device": _device_type(walked, args, kwargs),
        "ambient_modes": ambient_modes(),  # read before the capture enters its own modes (tracer.claims.ambient)
        "wrap_generation": wrap_generation(),
    }


def _device_type(walked: list[tuple[str, nn.Module]], args: tuple, kwargs: Mapping[str, Any]) -> str | None:
    """The device type the capture runs on: its first parameter's, else its first input's (None: neither).

    `walked` is the model's module walk (iterative: torch's `parameters()` is quadratic in nesting depth)."""
    first = next((p for _name, m in walked for p in m._parameters.values() if p is not None), None)
    if first is None:
        first = next((t for _p, t in [*iter_tensors(list(args), "args"), *iter_tensors(dict(kwargs), "kwargs")]), None)
    return first.device.type if first is not None else None


def config_fingerprint(config: Any) -> str | None:
    """SHA-256 of a transformers config's graph-relevant fields (None for a model without config).

    Kept per config object with a deep copy of its attributes: a later capture of the same config
    compares the attributes (C-speed equality) instead of `to_dict()`'s deep copy and a new digest, and
    any change to them (or an attribute that cannot be compared) makes the fingerprint anew."""
    if config is None or not hasattr(config, "to_dict"):
        return None
    kept = _FINGERPRINTS.get(id(config))
    if kept is not None and kept[0]() is config and _unchanged(kept[1], config):
        return kept[2]
    data = {k: v for k, v in config.to_dict().items() if k not in _VOLATILE_CONFIG_KEYS}
    digest = canonical_digest(data)
    _keep(config, digest)
    return digest


# id(config) -> (weak reference to it, deep copy of its class and attributes, fingerprint); an entry
# leaves with its config
_FINGERPRINTS: dict[int, tuple[Any, tuple[type, dict], str]] = {}


def _unchanged(snapshot: tuple[type, dict], config: Any) -> bool:
    try:
        return type(config) is snapshot[0] and bool(snapshot[1] == vars(config))
    except Exception:  # noqa: BLE001 - an attribute without a plain equality (an array): not comparable, made anew
        return False


def _keep(config: Any, digest: str) -> None:
    key = id(config)
    try:
        snapshot = (type(config), copy.deepcopy(vars(config)))
        ref = weakref.ref(config, lambda _ref: _FINGERPRINTS.pop(key, None))
    except Exception:  # noqa: BLE001 - not copyable or not weakly referable: nothing kept
        return
    _FINGERPRINTS[key] = (ref, snapshot, digest)


def _use_cache(config: Any, kwargs: Mapping[str, Any]) -> Any:
    if "use_cache" in kwargs:
        return bool(kwargs["use_cache"])
    value = getattr(config, "use_cache", None) if config is not None else None
    return bool(value) if value is not None else None


def _mask_policy(kwargs: Mapping[str, Any]) -> str:
    mask = next((kwargs[k] for k in MASK_KWARGS if k in kwargs), None)
    if mask is None:
        return "none"
    if not isinstance(mask, torch.Tensor):
        return f"non-tensor ({type(mask).__name__})"
    if mask.is_meta:
        return "meta (values unknown)"
    return "all_ones" if bool((mask != 0).all()) else "padded"


def twin_mismatches(claimed: Mapping[str, Any], observed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every field where two twin descriptors disagree, named, in a stable order."""
    found = []
    for key in ("model_class", "config_fingerprint", "attn_implementation", "use_cache", "attention_mask"):
        if claimed.get(key) != observed.get(key):
            found.append({"field": key, "structure": claimed.get(key), "real": observed.get(key)})
    for name in ("torch", "transformers"):
        a, b = claimed.get("versions", {}).get(name), observed.get("versions", {}).get(name)
        if a != b:
            found.append({"field": f"versions.{name}", "structure": a, "real": b})
    a_train, b_train = set(claimed.get("training_modules", ())), set(observed.get("training_modules", ()))
    if a_train != b_train:
        first = sorted(a_train ^ b_train)[0]
        found.append({"field": "training", "module": first or "<root>",
                      "structure": "train" if first in a_train else "eval",
                      "real": "train" if first in b_train else "eval"})
    a_in, b_in = claimed.get("inputs", []), observed.get("inputs", [])
    if [list(x) for x in a_in] != [list(x) for x in b_in]:
        found.append({"field": "inputs", "structure": a_in, "real": b_in})
    return found
