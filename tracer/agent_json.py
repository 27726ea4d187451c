"""A trace as plain JSON for coding agents: summary, module tree, ops by label and by module,
the ladder state with its evidence, and doctor rows when asked (schema in docs/agent.md).

Everything returned is built from lists, dicts, strings, numbers, booleans and None, in an order
fixed by the trace (execution order, module preorder), so `json.dumps` of it is deterministic.
"""
from __future__ import annotations

from typing import Any, Iterable

from .errors import InvalidInputError
from .ir import INPUT_KIND, OUTPUT_KIND, Op, Trace
from .provenance import plain_data

SCHEMA = "torchlens-explore.agent/1"
_PROVENANCE_KEYS = ("config_source", "text_route", "admission", "versions", "captured_at")


def agent_json(trace: Trace, *, ops: bool = True, fold: bool = True, doctor: Any = None,
               max_ops: int | None = None) -> dict[str, Any]:
    """The whole document: `ops=False` leaves the op table out, `max_ops` keeps its first `max_ops` ops in
    execution order (and says so in `ops_omitted`), `fold` folds repeated blocks in the module tree,
    `doctor` (a `tracer.doctor` report, or a model to run the doctor on) adds its rows."""
    if max_ops is not None and (not isinstance(max_ops, int) or isinstance(max_ops, bool) or max_ops < 1):
        raise InvalidInputError(f"max_ops {max_ops!r} is not a positive integer", site="agent_json(max_ops)",
                                remedy="Pass max_ops=None for every op, or a cap such as 200 (ops=False leaves them out).")
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "summary": summary_json(trace),
        "ladder": ladder_json(trace),
        "modules": module_tree_json(trace, fold=fold),
    }
    if ops:
        kept = trace.ops if max_ops is None else trace.ops[:max_ops]
        doc["ops"] = {op.label: op_json(trace, op) for op in kept}
        doc["ops_by_module"] = ops_by_module(trace, kept)
        if len(kept) < len(trace.ops):
            doc["ops_omitted"] = {"kept": len(kept), "total": len(trace.ops), "first_omitted": trace.ops[len(kept)].label,
                                  "how_to_get_more": "raise max_ops, or read ops by module or label (find_ops)"}
    doc["doctor"] = doctor_json(doctor) if doctor is not None else None
    return doc


# -- ladder ---------------------------------------------------------------------------------
def ladder_json(trace: Trace) -> dict[str, Any]:
    """The ladder state, its wording, and the evidence it rests on (the envelope's fields, or eager facts)."""
    from .claims.ladder import ladder_description, ladder_headline

    state = trace.ladder_state
    return {"state": state, "headline": ladder_headline(state), "description": ladder_description(state),
            "verified": trace.provenance.verified, "evidence": _evidence(trace)}


def _evidence(trace: Trace) -> dict[str, Any]:
    env = trace.envelope
    if env is None:
        return {"mode": "eager", "values_saved": len(trace.values),
                "unverified_reasons": list(trace.provenance.unverified_reasons)}
    plans = plain_data(env.plan_checks)
    return {
        "mode": env.mode, "substrate": env.substrate, "values_available": env.values_available, "outcome": env.outcome,
        "input_plan": plain_data(env.input_plan),
        "simulated_device": (env.twin or {}).get("simulated_device"),
        "claims": {name: {"rows": count, "digest": env.claim_digests.get(name)} for name, count in env.counts.items()},
        "digest": env.digest,
        "discharge": plain_data(env.discharge),
        "plan_checks": {"count": len(plans), "last": plans[-1] if plans else None},
        "history": plain_data(env.history),
        "ambient_modes": plain_data(env.ambient_modes),
        "wrap_generation": plain_data(env.wrap_generation),
        "unverified_reasons": list(trace.provenance.unverified_reasons),
    }


# -- summary and modules ------------------------------------------------------------------------
def summary_json(trace: Trace) -> dict[str, Any]:
    """Model class, op/edge/module counts, parameters (tied counted once), kinds, inputs, outputs, ladder state."""
    kinds = trace.kind_counts()
    prov = trace.provenance.to_dict()
    return {
        "model_class": trace.model_class,
        "ops": len(trace.ops),
        "computed_ops": sum(n for k, n in kinds.items() if k not in (INPUT_KIND, OUTPUT_KIND)),
        "edges": trace.num_edges,
        "modules": len(trace.modules),
        "parameters": trace.param_count(),
        "parameters_counting_tied": trace.param_count(count_tied_once=False),
        "buffers": sum(1 for r in trace.params.values() if r.is_buffer),
        "kinds": dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        "inputs": [_io_json(op) for op in trace.inputs],
        "outputs": [_io_json(op) for op in trace.outputs],
        "structure_only": trace.structure_only,
        "values_saved": len(trace.values),
        "ladder_state": trace.ladder_state,
        "provenance": {k: prov[k] for k in _PROVENANCE_KEYS if k in prov},
    }


def _io_json(op: Op) -> dict[str, Any]:
    return {"label": op.label, "path": op.io_path, **_meta_json(op)}


def module_tree_json(trace: Trace, *, fold: bool = True) -> dict[str, Any] | None:
    """The module tree from the root: class, parameters and ops under each module, calls, children;
    with `fold`, a run of identical numbered siblings appears once with `repeat` naming all of them."""
    from .module_tree import fold_runs, module_op_counts, module_param_counts

    if "" not in trace.modules:
        return None
    params, op_counts, memo = module_param_counts(trace), module_op_counts(trace), {}

    def node(address: str) -> dict[str, Any]:
        scope = trace.modules[address]
        return {"address": address, "class": scope.class_name, "parameters": params.get(address, 0),
                "ops": op_counts.get(address, 0), "calls": len(scope.calls), "children": []}

    root = node("")
    stack = [("", root)]
    while stack:  # iterative: any nesting depth
        address, out = stack.pop()
        children = tuple(c for c in trace.modules[address].children if c in trace.modules)
        runs = fold_runs(trace, children, memo) if fold else [[c] for c in children]
        for run in runs:
            child = node(run[0])
            if len(run) > 1:
                child["repeat"] = {"count": len(run), "addresses": list(run)}
            out["children"].append(child)
            stack.append((run[0], child))
    return root


def ops_by_module(trace: Trace, ops: Iterable[Op] | None = None) -> dict[str, list[str]]:
    """Labels of the ops (all, or those given) each module ran directly (its innermost scope), modules in
    first-use order."""
    found: dict[str, list[str]] = {}
    for op in trace.ops if ops is None else ops:
        found.setdefault(op.module, []).append(op.label)
    return found


# -- ops --------------------------------------------------------------------------------------
def op_json(trace: Trace, op: Op, *, detail: bool = False) -> dict[str, Any]:
    """One op: kind, function, module, output shape/dtype/device, parents (label, argument), params;
    `detail` adds its consumers, the enclosing module calls and the source line."""
    out: dict[str, Any] = {"label": op.label, "index": op.index, "kind": op.kind, "func": op.func,
                           "module": op.module_address, **_meta_json(op),
                           "parents": [[e.source, e.position] for e in op.parents], "params": list(op.params)}
    if op.num_outputs > 1:
        out["output"] = [op.output_index, op.num_outputs]
    if op.inplace:
        out["inplace"] = True
    if detail:
        out["children"] = list(trace.children_of(op.label))
        out["module_stack"] = [[a, c] for a, c in op.module_stack]
        out["source"] = str(op.source) if op.source is not None else None
        out["saved_value"] = op.label in trace.values
        if op.io_path:
            out["path"] = op.io_path
    return out


def _meta_json(op: Op) -> dict[str, Any]:
    m = op.out
    return {"shape": list(m.shape) if m else None, "dtype": m.dtype if m else None, "device": m.device if m else None}


def find_op(trace: Trace, site: str) -> Op:
    """The op a label, a module path (`model.layers.0.mlp[:call]`, its first output) or `module/label` names."""
    from .claims.plan import resolve_site

    op = resolve_site(trace, site) if isinstance(site, str) else None
    if op is None:
        raise InvalidInputError(f"no op or module output at {site!r} in this trace", site=f"op {site!r}",
                                remedy="Name an op label (e.g. linear_3), a module path (model.layers.0.mlp) or "
                                       "module/label; find_ops lists them.")
    return op


def select_ops(trace: Trace, *, kind: str | None = None, module: str | None = None,
               positions: Iterable[int] | None = None) -> list[Op]:
    """Ops (execution order) of `kind`, inside `module` (or a submodule), among `positions` when given."""
    chosen = [trace.ops[i] for i in positions] if positions is not None else list(trace.ops)
    if kind:
        chosen = [op for op in chosen if op.kind == kind or op.func == kind]
    if module is not None and module != "":
        prefix = module + "."
        chosen = [op for op in chosen if op.module == module or op.module.startswith(prefix)]
    return chosen


# -- doctor ---------------------------------------------------------------------------------
def doctor_json(doctor: Any) -> dict[str, Any]:
    """Doctor rows from a `DoctorReport`, or from running the doctor on a model."""
    from .compat import DoctorReport, doctor as run_doctor

    from torch import nn

    if isinstance(doctor, DoctorReport):
        report = doctor
    elif isinstance(doctor, nn.Module):
        report = run_doctor(doctor)
    else:
        raise InvalidInputError(f"doctor= takes a tracer.doctor report or a model, not a {type(doctor).__name__}",
                                site="to_agent_json(doctor=...)", remedy="Pass tracer.doctor(model) or the model itself.")
    return plain_data(report.to_dict())



# -- the API map ------------------------------------------------------------------------------
API_MAP_SCHEMA = "torchlens-explore.api_map/1"


def api_map_json() -> dict[str, Any]:
    """Every public name of `tracer` (its `__all__`, importing each): kind (class, function, module or value),
    the module that defines it and the first line of its docstring."""
    import inspect

    import tracer

    rows = []
    for name in sorted(tracer.__all__):
        obj = getattr(tracer, name)
        kind = ("class" if inspect.isclass(obj) else "module" if inspect.ismodule(obj)
                else "function" if callable(obj) else "value")
        doc = (inspect.getdoc(obj) or "").strip().splitlines() if kind != "value" else []
        rows.append({"name": name, "kind": kind,
                     "module": obj.__name__ if kind == "module" else getattr(obj, "__module__", "tracer"),
                     "summary": doc[0] if doc else (repr(obj) if kind == "value" else "")})
    return {"schema": API_MAP_SCHEMA, "package": "tracer", "version": tracer.__version__, "names": rows}
