"""One cell of the feature sweep: a case's column run and classified.

Outcomes reuse the zoo's (`tests.zoo.outcome`: pass, a check that did not hold, untyped by class)
with three more: `refused` (a `tracer.errors.TracerError`, its code), `silent` (the call reports
success but the trace misses computation, found by `observe.gaps`, independent of the tracer's
claims) and `disclosed` (the same gap, but the trace says `verified=False` and why).
`n/a` marks a column that is not meaningful for a row; `unavailable` one torch itself cannot run
(the plain forward fails on meta, say): neither is a tracer result.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import warnings
from typing import Any, Callable

import torch
from torch import nn

from tests.zoo.compare import bit_equal
from tests.zoo.outcome import failed, from_exception, one_line, passed, skipped

from .cases import BY_NAME, SECOND_SUBJECT, Case, Rendezvous
from .observe import INVENTED, ParamReads, gaps, kinds, state_names

COLUMNS = ("capture", "validate", "save_load_validate", "weights_free")
REFUSED, SILENT, DISCLOSED, NA, UNAVAILABLE = "refused", "silent", "disclosed", "n/a", "unavailable"
Subject = tuple[Callable[[str], nn.Module], Callable[[str], tuple]]


def outcome_of(exc: BaseException) -> dict[str, Any]:
    """The zoo's classification of an exception, a typed one named `refused`."""
    out = from_exception(exc)
    if out["result"] == "typed":
        out["result"] = REFUSED
    return out


def _comparable(value: Any, shapes_only: bool) -> Any:
    """`value` with tensors a plain comparison can read: subclasses unwrapped, sparse and nested dense."""
    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if hasattr(t, "elem"):
            t = t.elem
        if shapes_only:
            return (tuple(t.shape), str(t.dtype))
        if t.is_nested:
            return [one(part) for part in t.unbind()]
        if t.layout != torch.strided:
            return t.to_dense()
        if t.is_quantized:
            return t.dequantize()
        return t
    return torch.utils._pytree.tree_map(one, value)


def _shapes(value: Any) -> Any:
    """`value` with each tensor replaced by its shape alone."""
    return torch.utils._pytree.tree_map(lambda t: tuple(t.shape) if isinstance(t, torch.Tensor) else t, value)


def _same(a: Any, b: Any, shapes_only: bool) -> bool:
    a, b = _comparable(a, shapes_only), _comparable(b, shapes_only)
    return a == b if shapes_only else bit_equal(a, b)


class _Captured:
    """One subject captured under the case's context, with what the plain forward observably read."""

    def __init__(self, case: Case, subject: Subject, device: str, structure_only: bool = False) -> None:
        import tracer

        build, make_inputs = subject
        self.case, self.error, self.trace, self.reads = case, None, None, set()
        with case.context():
            try:
                self.model, self.inputs = build(device), make_inputs(device)
                self.plain = self.model(*self.inputs)
            except Exception as exc:  # torch itself cannot run the row: not a tracer result
                raise Unavailable(exc) from exc
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    options = tracer.CaptureOptions(structure_only=structure_only)
                    self.trace = tracer.trace(self.model, self.inputs, capture=options)
            except Exception as exc:  # recorded: typed or untyped
                self.error = exc
            twin_build = case.eager if subject[0] is case.build and case.eager is not None else build
            try:
                twin = twin_build(device)
                with ParamReads(twin) as observer:
                    twin(*make_inputs(device))
            except Exception as exc:  # the independent observation could not run: no verdict on gaps
                raise Unavailable(exc, "the plain twin does not run under the sweep's observer") from exc
            self.reads = observer.read
            self.twin_kinds = None
            if case.match_kinds and self.trace is not None:
                try:
                    self.twin_kinds = kinds(tracer.trace(twin_build(device), make_inputs(device),
                                                         capture=tracer.CaptureOptions(structure_only=structure_only)))
                except Exception as exc:  # the reference capture itself fails: no verdict on this row
                    raise Unavailable(exc, "the plain twin's own capture fails") from exc
        self.own = set(state_names(self.model).values()) | set(self.model.state_dict())

    def gaps(self, trace: Any = None) -> list[str]:
        return gaps(trace or self.trace, self.reads, self.own, self.case.expect, self.twin_kinds)


class Unavailable(Exception):
    """The plain forward (or the sweep's observation of it) fails without the tracer."""

    def __init__(self, cause: BaseException, why: str = "the plain forward fails without the tracer") -> None:
        super().__init__(f"{why}: {type(cause).__name__}: {cause}")
        self.cause, self.why = cause, why


def _judged(ok: dict[str, Any], trace: Any, found: list[str], claim: str) -> dict[str, Any]:
    """`ok` when nothing is missing; otherwise silent (the trace claims verified) or disclosed."""
    prov = trace.provenance
    if not prov.verified:
        why = "; ".join(prov.unverified_reasons) or "verified=False"
        return {"result": DISCLOSED, "code": "unverified", "reason": one_line(why),
                **({"missing": one_line("; ".join(found), 400)} if found else {})}
    if found:
        invented = all(g.startswith(INVENTED) for g in found)
        return {"result": SILENT, "code": "invented_computation" if invented else "missing_computation",
                "reason": one_line(f"{claim}; " + "; ".join(found), 400)}
    return ok


def _report_outcome(report: Any) -> dict[str, Any] | None:
    """None when the report passed. A finding that an op cannot be replayed is validate's typed refusal
    (its check is the code); one restating the capture's own gap is disclosed; any other is a failed check."""
    if report.passed:
        return None
    first = report.findings[0]
    text = f"[{first.check}] {first.label}: {first.message}"
    if first.check.startswith("not_replayable"):
        return {"result": REFUSED, "code": first.check, "reason": one_line(text)}
    if first.check == "verification":
        return {"result": DISCLOSED, "code": "unverified", "reason": one_line(text)}
    return failed(f"validation_{first.check}", text)


def _left_behind(grad_before: bool) -> str:
    """What a capture left changed in torch's global state (mode stacks, grad mode); '' when nothing."""
    changed = []
    if torch._C._len_torch_function_stack():
        changed.append(f"{torch._C._len_torch_function_stack()} torch function mode(s) left on the stack")
    if torch._C._len_torch_dispatch_stack():
        changed.append(f"{torch._C._len_torch_dispatch_stack()} dispatch mode(s) left on the stack")
    if torch.is_grad_enabled() != grad_before:
        changed.append("grad mode changed")
    return "; ".join(changed)


def column_capture(case: Case, subject: Subject) -> dict[str, Any]:
    grad = torch.is_grad_enabled()
    cap = _Captured(case, subject, "cpu")
    left = _left_behind(grad)
    if left:
        return failed("state_left_changed", left)
    if cap.error is not None:
        return outcome_of(cap.error)
    if not _same(cap.trace.output, cap.plain, case.compare == "meta"):
        return failed("output_not_bit_equal", "the traced output differs from the plain forward")
    ok = {**passed(), "ops": len(cap.trace.ops)}
    return _judged(ok, cap.trace, cap.gaps(), "the capture returned a trace reporting verified")


def column_validate(case: Case, subject: Subject) -> dict[str, Any]:
    import tracer

    cap = _Captured(case, subject, "cpu")
    if cap.error is not None:
        return skipped("needs capture")
    with _mode_for(case):
        report = tracer.validate(cap.trace)
    bad = _report_outcome(report)
    return bad or _judged(passed(), cap.trace, cap.gaps(), "validate passed")


def column_save_load_validate(case: Case, subject: Subject) -> dict[str, Any]:
    import tracer

    cap = _Captured(case, subject, "cpu")
    if cap.error is not None:
        return skipped("needs capture")
    with tempfile.TemporaryDirectory() as folder, _mode_for(case):
        cap.trace.save(folder)
        loaded = tracer.load(folder)
        report = tracer.validate(loaded, params=cap.model)
    bad = _report_outcome(report)
    if bad:
        return bad
    if [op.kind for op in loaded.ops] != [op.kind for op in cap.trace.ops]:
        return failed("load_changed_ops", f"{len(cap.trace.ops)} ops saved, {len(loaded.ops)} loaded")
    return _judged(passed(), loaded, cap.gaps(loaded), "validate passed on the loaded trace")


def column_weights_free(case: Case, subject: Subject) -> dict[str, Any]:
    if case.weights_free:
        return {"result": NA, "reason": case.weights_free}
    try:
        with case.context():
            model, inputs = subject[0]("meta"), subject[1]("meta")
            model(*inputs)
    except Exception as exc:  # torch itself cannot build or run the row on meta: not a tracer result
        return {"result": UNAVAILABLE, "code": type(exc).__name__, "reason": one_line(str(exc))}
    cap = _Captured(case, subject, "meta", structure_only=True)
    if cap.error is not None:
        return outcome_of(cap.error)
    # under autocast the capture models autocast's dtypes, which the plain meta forward does not have (on meta
    # autocast casts nothing): its shapes are checked here, its dtypes by the discharge against the real capture
    modeled = bool((cap.trace.provenance.admission or {}).get("autocast"))
    if not _same(_shapes(cap.trace.output) if modeled else cap.trace.output,
                 _shapes(cap.plain) if modeled else cap.plain, True):
        return failed("output_shapes_differ", "the weights-free output's shapes differ from the meta forward's")
    judged = _judged(passed(), cap.trace, cap.gaps(), "the weights-free capture returned a trace reporting verified")
    if judged["result"] != "pass":
        return judged
    real = _Captured(case, subject, "cpu")
    if real.error is not None:
        return {**passed(), "discharge": "not run: the real capture refused"}
    result = cap.trace.discharge_against(real.trace)
    if result.state != "CORROBORATED":
        return failed(f"discharge_{result.state.lower()}", str(result))
    return passed()


def _mode_for(case: Case) -> Any:
    """The case's context again for columns that must run inside it (fake tensors live in their mode)."""
    return case.context() if case.compare == "meta" else contextlib.nullcontext()


RUN = {"capture": column_capture, "validate": column_validate, "save_load_validate": column_save_load_validate,
       "weights_free": column_weights_free}


def _guarded(fn: Callable[[Case, Subject], dict[str, Any]], case: Case, subject: Subject) -> dict[str, Any]:
    try:
        return fn(case, subject)
    except Unavailable as exc:
        return {"result": UNAVAILABLE, "code": type(exc.cause).__name__, "reason": one_line(str(exc))}
    except Exception as exc:  # an exception escaping a public call made by the column
        return outcome_of(exc)


def _worst(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    order = ("untyped", SILENT, "failed", DISCLOSED, REFUSED, UNAVAILABLE, NA, "skipped", "pass")
    ranked = sorted(enumerate(outcomes), key=lambda io: order.index(io[1]["result"]) if io[1]["result"] in order else 0)
    i, worst = ranked[0]
    if len(outcomes) > 1 and worst["result"] != "pass":
        worst = {**worst, "reason": f"subject {i + 1} of {len(outcomes)}: {worst.get('reason', '')}"}
    return worst


def _in_threads(fn: Callable, case: Case, subjects: list[Subject]) -> list[dict[str, Any]]:
    """`fn` for each subject in its own thread; each forward of one meets the same forward of the other
    (`Rendezvous`: both run the same sequence of forwards), so the captures overlap."""
    barrier, out = threading.Barrier(len(subjects)), [None] * len(subjects)

    def run(i: int) -> None:
        barrier.wait()
        out[i] = _guarded(fn, case, subjects[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(subjects))]
    Rendezvous.barrier = threading.Barrier(len(subjects), timeout=120)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        Rendezvous.barrier = None
    return [o if o is not None else {"result": "untyped", "code": "ThreadDied", "reason": "no outcome"} for o in out]


def _in_processes(fn: Callable, case: Case, subjects: list[Subject]) -> list[dict[str, Any]]:
    import json

    children = []
    for subject in subjects:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one column for one subject, its outcome as JSON on the pipe
            os.close(read)
            try:
                text = json.dumps(_guarded(fn, case, subject))
            except BaseException as exc:  # noqa: BLE001 - reported through the pipe
                text = json.dumps({"result": "untyped", "code": type(exc).__name__, "reason": one_line(str(exc))})
            with os.fdopen(write, "w") as pipe:
                pipe.write(text)
            os._exit(0)
        os.close(write)
        children.append((pid, read))
    out = []
    for pid, read in children:
        with os.fdopen(read) as pipe:
            text = pipe.read()
        _, status = os.waitpid(pid, 0)
        out.append(json.loads(text) if text else {"result": "untyped", "code": "ProcessDied",
                                                   "reason": f"child exited with status {status}"})
    return out


def run_cell(name: str, column: str) -> dict[str, Any]:
    """The outcome of one cell (a sweep task): the case's column for its subject(s)."""
    case = BY_NAME[name]
    fn = RUN[column]
    torch.manual_seed(0)
    if not case.concurrency:
        out = _guarded(fn, case, (case.build, case.inputs))
    else:
        subjects = [(case.build, case.inputs), SECOND_SUBJECT[case.concurrency]]
        runner = _in_threads if case.concurrency == "threads" else _in_processes
        out = _worst(runner(fn, case, subjects))
    return {"case": name, "column": column, **out}
