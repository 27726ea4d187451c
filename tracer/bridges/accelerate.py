"""accelerate dispatch and offload: admission evidence, hook suspension, deferred weights.

accelerate's `AlignDevicesHook` loads offloaded weights in `pre_forward` and puts them
back on the meta device in `post_forward`, with ordinary torch calls. For one capture the
bridge wraps both so the session records nothing while they run (the hooks' weight
loading never appears as ops). The weights the forward used are attributed to the
parameter addresses by the session; afterwards the bridge replaces them in the live calls
by `OffloadedWeight` references, so no materialized shard is kept alive by the trace and
replay loads them again from the offload store.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import OffloadEvidenceMissingError
from ..replay.interpreter import Deferred


def hf_hook(module: nn.Module) -> Any:
    """The accelerate hook on `module`, or None. Read from the instance's `__dict__`, where accelerate's
    `module._hf_hook = hook` puts it: `getattr` on a module without one goes through `Module.__getattr__`
    and an AttributeError (about 1.5 us, for every module of every capture)."""
    return module.__dict__.get("_hf_hook")


def hooks_of(module: nn.Module) -> list[Any]:
    """The accelerate hooks on `module` (a SequentialHook unpacked)."""
    hook = hf_hook(module)
    if hook is None:
        return []
    return list(getattr(hook, "hooks", None) or [hook])


def _has_key(store: Any, key: str) -> bool:
    inner = getattr(store, "dataset", None)
    if inner is not None and hasattr(store, "prefix"):  # PrefixedDataset
        return _has_key(inner, f"{store.prefix}{key}")
    keys = getattr(store, "all_keys", None)  # OffloadedWeightsLoader: membership without loading
    if keys is not None:
        return key in keys
    try:
        return key in store
    except Exception:
        return False


def _storage(store: Any) -> str:
    while getattr(store, "dataset", None) is not None and hasattr(store, "prefix"):
        store = store.dataset
    return "disk" if getattr(store, "save_folder", None) else "cpu"


def covering_hook(model: nn.Module, address: str) -> tuple[Any, str] | None:
    """The offload hook that loads the tensor at `address`, with its key in the hook's store."""
    owner = address.rpartition(".")[0]
    prefix = owner
    while True:
        module = model.get_submodule(prefix) if prefix else model
        for hook in hooks_of(module):
            store = getattr(hook, "weights_map", None)
            if not getattr(hook, "offload", False) or store is None:
                continue
            if prefix != owner and not getattr(hook, "place_submodules", False):
                continue
            key = address[len(prefix) + 1:] if prefix else address
            if _has_key(store, key):
                return hook, key
        if not prefix:
            return None
        prefix = prefix.rpartition(".")[0]


def offload_evidence(model: nn.Module) -> dict[str, Any] | None:
    """Evidence that the model's meta tensors are loaded by accelerate hooks, or None without hooks.

    Raises `OffloadEvidenceMissingError` when hooks exist but a meta parameter has none loading it.
    """
    hooked = [addr for addr, m in model.named_modules() if hooks_of(m)]
    if not hooked:
        return None
    offloaded, missing, storage = [], [], set()
    buffers = {name for name, _ in model.named_buffers()}
    for addr, t in [*model.named_parameters(), *model.named_buffers()]:
        if not t.is_meta:
            continue
        found = covering_hook(model, addr)
        if found is None:
            missing.append(addr)
        else:
            offloaded.append(addr)
            storage.add(_storage(found[0].weights_map))
    if missing:
        raise OffloadEvidenceMissingError(
            f"{len(missing)} meta tensor(s) have no accelerate offload hook that loads them: {', '.join(missing[:5])}",
            site=f"parameter '{missing[0]}'", missing=missing)
    return {
        "hooked_modules": len(hooked), "offloaded": len(offloaded), "storage": sorted(storage),
        "offloaded_buffers": sorted(a for a in offloaded if a in buffers),
        "addresses": offloaded,
    }


def _hooks_file() -> str | None:
    """The source file of accelerate's hooks (their `new_forward` wraps every hooked module's forward)."""
    import sys

    hooks = sys.modules.get("accelerate.hooks")
    return getattr(hooks, "__file__", None) if hooks is not None else None


def _in_memory(store: Any, key: str) -> torch.Tensor | None:
    """The tensor an offload store holds in memory for `key` (a dict, or a loader's state_dict), without loading
    anything from disk; None where it is not in memory."""
    while getattr(store, "dataset", None) is not None and hasattr(store, "prefix"):  # PrefixedDataset
        key, store = f"{store.prefix}{key}", store.dataset
    table = store if isinstance(store, dict) else getattr(store, "state_dict", None)
    value = table.get(key) if isinstance(table, dict) else None
    return value if isinstance(value, torch.Tensor) else None


def offload_ties(model: nn.Module, evidence: dict[str, Any] | None) -> dict[str, tuple[list[str], str]]:
    """Parameters tied in the model as prepared that offload split into one meta tensor per module:
    first address (in `named_parameters` order, as a plain capture names it) -> (its other addresses, evidence).

    Evidence: the offload store holds one storage for them (cpu_offload keeps the prepared state dict), or,
    where the store cannot tell (disk), the model declares the tie (transformers' `all_tied_weights_keys`)."""
    if not evidence or not evidence.get("offloaded"):
        return {}
    offloaded = set(evidence.get("addresses", ()))
    params = [(a, p) for a, p in model.named_parameters(remove_duplicate=False) if a in offloaded]
    order = {a: i for i, (a, _p) in enumerate(params)}
    groups: dict[tuple, list[str]] = {}
    for address, p in params:
        found = covering_hook(model, address)
        held = _in_memory(found[0].weights_map, found[1]) if found is not None else None
        if held is None or held.layout is not torch.strided:
            continue
        key = (held.untyped_storage().data_ptr(), held.storage_offset(), tuple(held.shape), held.stride(), held.dtype)
        groups.setdefault(key, []).append(address)
    ties: dict[str, tuple[list[str], str]] = {}
    grouped: set[str] = set()
    for members in groups.values():
        if len(members) > 1:
            ties[members[0]] = (members[1:], "one storage in the offload store")
            grouped.update(members)
    declared = getattr(model, "all_tied_weights_keys", None)
    shapes = {a: (tuple(p.shape), p.dtype) for a, p in params}
    if isinstance(declared, dict):
        for target, source in declared.items():
            if not (isinstance(target, str) and isinstance(source, str)) or target in grouped or source in grouped:
                continue
            if target in shapes and source in shapes and shapes[target] == shapes[source]:
                first, other = sorted((target, source), key=order.__getitem__)
                ties.setdefault(first, ([], "declared by the model (all_tied_weights_keys)"))[0].append(other)
                grouped.update((target, source))
    return ties


def retie(session: Any, model: nn.Module, ties: dict[str, tuple[list[str], str]]) -> None:
    """Name each split tied parameter by its first address in the session, as the plain model's capture does."""
    if not ties:
        return
    tensors = dict(model.named_parameters(remove_duplicate=False))
    for canonical, (others, _why) in ties.items():
        if canonical not in session.tied:
            continue
        for other in others:
            t = tensors.get(other)
            if t is None or session.param_ids.get(id(t)) != other:
                continue
            session.param_ids[id(t)] = canonical
            session.tied[canonical].extend([other, *session.tied.pop(other, [])])


class OffloadedWeight(Deferred):
    """A weight the forward used, held by its key in accelerate's offload store."""

    def __init__(self, store: Any, key: str, device: torch.device, dtype: torch.dtype) -> None:
        self.store, self.key, self.device, self.dtype = store, key, device, dtype

    def materialize(self) -> torch.Tensor:
        return self.store[self.key].to(device=self.device, dtype=self.dtype)

    def __repr__(self) -> str:
        return f"OffloadedWeight({self.key!r})"


class OffloadBridge:
    """Suspends recording inside accelerate's hooks for one session; seals offload facts into the trace."""

    def __init__(self, model: nn.Module, session: Any, hooks: list[Any]) -> None:
        self.model = model
        self.session = session
        self.hooks = hooks
        self.saved: list[tuple[Any, str, Any]] = []
        self.evidence = offload_evidence(model)
        # The session knows tensors by id: the meta tensors a hook swaps out must stay alive (they
        # cost nothing) so their ids are not reused; the session remembers a materialized weight
        # weakly, and forgets it here when the hook puts it back (kept only in `materialized`, for `seal`).
        self.originals = [*model.parameters(), *model.buffers()]
        self.original_ids = {id(t) for t in self.originals}
        self.materialized: dict[int, str] = {}

    @classmethod
    def for_model(cls, model: nn.Module, session: Any) -> "OffloadBridge | None":
        from ..capture.walk import named_modules

        walked = getattr(session, "named", None) or named_modules(model)  # the session's walk when it has one
        outer = {id(h): h for h in map(hf_hook, (m for _a, m in walked)) if h is not None}
        return cls(model, session, list(outer.values())) if outer else None

    def install(self) -> None:
        self.ties = offload_ties(self.model, self.evidence)
        retie(self.session, self.model, self.ties)
        hooks_file = _hooks_file()  # accelerate's `new_forward` is not the user's line: sites skip it
        if hooks_file and hooks_file not in self.session._prefixes:
            self.session._prefixes = (*self.session._prefixes, hooks_file)
        for hook in self.hooks:
            for name in ("pre_forward", "post_forward"):
                self.saved.append((hook, name, hook.__dict__.get(name)))
                setattr(hook, name, self._suspended(getattr(hook, name), forget=name == "post_forward"))

    def remove(self) -> None:
        while self.saved:
            hook, name, previous = self.saved.pop()
            if previous is None:
                hook.__dict__.pop(name, None)
            else:
                setattr(hook, name, previous)

    def _suspended(self, fn: Any, forget: bool) -> Any:
        session = self.session

        def run(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            session.suspended += 1
            try:
                if forget:
                    self._forget(module)
                return fn(module, *args, **kwargs)
            finally:
                session.suspended -= 1

        return run

    def _forget(self, module: nn.Module) -> None:
        swapped = self.session.swapped
        for t in [*module.parameters(), *module.buffers()]:
            if id(t) not in self.original_ids:
                hit = swapped.pop(id(t), None)
                if hit is not None:
                    self.materialized[id(t)] = hit[0]

    def report(self, calls: dict[str, tuple], findings: Any) -> dict[str, tuple]:
        """Offload evidence for the provenance; returns the live calls with materialized weights deferred."""
        evidence = self.evidence or {}
        offload = {k: v for k, v in evidence.items() if k != "addresses"}
        if getattr(self, "ties", None):
            offload["retied"] = {canonical: {"tied": others, "evidence": why}
                                 for canonical, (others, why) in self.ties.items()}
        findings.add(offload=offload)
        if not evidence.get("offloaded"):
            return calls
        param_ids = self.materialized
        swapped = 0
        deferred = dict(calls)
        for label, (func, args, kwargs) in calls.items():
            new_args = tuple(self._defer(a, param_ids) for a in args)
            new_kwargs = {k: self._defer(v, param_ids) for k, v in kwargs.items()}
            if any(a is not b for a, b in zip(new_args, args)) or any(new_kwargs[k] is not kwargs[k] for k in kwargs):
                deferred[label] = (func, new_args, new_kwargs)
                swapped += 1
        findings.add(deferred_args=swapped > 0)
        findings.warn(
            f"accelerate offload ({'/'.join(evidence['storage'])}): {evidence['offloaded']} tensors live on the meta "
            "device outside a forward; their parameter records are shape-only (values exist only while their "
            "module runs, and replay reloads them from the offload store)")
        return deferred

    def _defer(self, a: Any, param_ids: dict[int, str]) -> Any:
        if isinstance(a, nn.Parameter) and not a.is_meta:
            address = param_ids.get(id(a))
            found = covering_hook(self.model, address) if address else None
            if found is not None and self._is_materialized(address, a):
                return OffloadedWeight(found[0].weights_map, found[1], a.device, a.dtype)
            return a
        if type(a) in (list, tuple) and any(isinstance(b, nn.Parameter) for b in a):
            return type(a)(self._defer(b, param_ids) for b in a)
        return a

    def _is_materialized(self, address: str, t: torch.Tensor) -> bool:
        owner, _, name = address.rpartition(".")
        module = self.model.get_submodule(owner) if owner else self.model
        return module._parameters.get(name) is not t
