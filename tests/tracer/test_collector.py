"""The capture's cyclic-GC setting: raised while the forward runs, restored afterwards (also on error)."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import tracer
from tracer.capture import kernel
from tracer.capture.collector import YOUNG_THRESHOLD


class _Probe(nn.Module):
    """Records the GC threshold seen inside its forward; raises when asked to."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.seen: tuple[int, ...] = ()
        self.frozen = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = gc.get_threshold()
        self.frozen = gc.get_freeze_count()
        if self.fail:
            raise ValueError("forward failed on purpose")
        return x * 2


@pytest.mark.parametrize("fail", [False, True])
def test_threshold_raised_in_forward_and_restored(fail: bool) -> None:
    before = gc.get_threshold()
    probe = _Probe(fail)
    if fail:
        with pytest.raises(ValueError):
            tracer.trace(probe, (torch.ones(2),))
    else:
        tracer.trace(probe, (torch.ones(2),))
    assert probe.seen[0] == max(before[0], YOUNG_THRESHOLD)
    assert gc.get_threshold() == before
    assert probe.frozen > 0  # the heap alive at the start was frozen for the forward
    assert gc.get_freeze_count() == 0  # and released afterwards


def test_a_process_own_freeze_is_left_alone() -> None:
    gc.freeze()
    mine = gc.get_freeze_count()
    try:
        probe = _Probe()
        tracer.trace(probe, (torch.ones(2),))
        assert probe.frozen <= mine  # nothing added (a frozen object may die meanwhile): unfreezing would release the process's own
        assert 0 < gc.get_freeze_count() <= mine
    finally:
        gc.unfreeze()


def test_a_higher_threshold_is_kept() -> None:
    before = gc.get_threshold()
    gc.set_threshold(5 * YOUNG_THRESHOLD, *before[1:])
    try:
        probe = _Probe()
        tracer.trace(probe, (torch.ones(2),))
        assert probe.seen[0] == 5 * YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == 5 * YOUNG_THRESHOLD
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("fail", [False, True])
def test_setting_holds_while_the_trace_is_assembled_and_is_restored(monkeypatch, fail: bool) -> None:
    """The heap stays frozen after the forward until the trace is built (its records and ops are what the
    collections walk), and is released also when building fails."""
    import tracer.tracing as tracing

    before = gc.get_threshold()
    seen: list[tuple] = []
    real_build = tracing.build_trace

    def build_trace(*args, **kwargs):
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        if fail:
            raise RuntimeError("assembly failed on purpose")
        return real_build(*args, **kwargs)

    monkeypatch.setattr(tracing, "build_trace", build_trace)
    if fail:
        with pytest.raises(RuntimeError):
            tracer.trace(_Probe(), (torch.ones(2),))
    else:
        tracer.trace(_Probe(), (torch.ones(2),))
    assert seen and seen[0][0][0] == max(before[0], YOUNG_THRESHOLD) and seen[0][1] > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_what_the_capture_made_ends_in_the_oldest_generation() -> None:
    """The trace outlives the capture: it is not left young for the next passes to walk in vain."""
    t = tracer.trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), (torch.ones(1, 2),))
    assert gc.is_tracked(t) and gc.is_tracked(t.ops)
    young = {id(o) for o in gc.get_objects(generation=0)} | {id(o) for o in gc.get_objects(generation=1)}
    assert id(t) not in young and id(t.ops) not in young
    assert any(o is t for o in gc.get_objects(generation=2))


def test_no_young_pass_runs_when_the_trace_is_built(monkeypatch) -> None:
    """Assembly allocates thousands of objects with the GC paused; they move to the oldest generation before
    it resumes, so no young pass (one walk of all of them, finding nothing) is due as the capture returns."""
    from tracer import tracing

    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(1500)])  # assembly alone allocates > YOUNG_THRESHOLD
    x = torch.ones(1, 2)
    passes: list[str] = []
    where = ["before"]
    young_after: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            passes.append(where[0])

    assemble = tracing._assemble

    def marked(*args, **kwargs):
        where[0] = "assembly"
        try:
            return assemble(*args, **kwargs)
        finally:
            where[0] = "after"

    monkeypatch.setattr(tracing, "_assemble", marked)
    gc.collect()
    gc.callbacks.append(count)
    try:
        for _ in range(3):
            where[0] = "before"
            t = tracer.trace(model, (x,), capture=tracer.CaptureOptions(save="none"))
            young_after.append(gc.get_count()[0])  # objects counted toward the next young pass
    finally:
        gc.callbacks.remove(count)
    assert len(t.ops) > 1500
    assert "assembly" not in passes and "after" not in passes, passes
    assert max(young_after) < 100, young_after  # the build's allocations are not left due
    assert gc.isenabled()


def test_assembling_pauses_and_restores_outside_a_capture() -> None:
    from tracer.capture.collector import assembling

    with assembling():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with assembling():
            pass
        assert not gc.isenabled()  # a process's own pause is kept
    finally:
        gc.enable()


ROOT = Path(__file__).resolve().parents[2]
TRACER_DIR = os.path.dirname(tracer.__file__) + os.sep


def _made_by_a_capture(obj) -> bool:
    """Whether a cyclic garbage object is the capture's: of a tracer or torch type, or a tracer function or frame."""
    if (getattr(type(obj), "__module__", "") or "").partition(".")[0] in ("tracer", "torch"):
        return True
    code = getattr(obj, "f_code", None) or getattr(obj, "__code__", None)
    return code is not None and code.co_filename.startswith(TRACER_DIR)


def _dropped_trace(save: str) -> dict:
    """Capture, drop the trace with collection paused, then say what a collection would still find of the
    capture's. Run in an interpreter of its own (below): the collector sees the whole process, and in the
    suite's workers threads of earlier tests (app servers) drop cycles of their own meanwhile (seen: an
    `app.offloop.OffLoop`, and a loaded trace of a stopped server's session) that no filter can tell apart."""
    import weakref

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.ones(3, 4)
    tracer.trace(model, (x,), capture=tracer.CaptureOptions(save=save))  # first-call caches filled
    gc.collect()
    gc.disable()
    t = tracer.trace(model, (x,), capture=tracer.CaptureOptions(save=save))
    watched = [weakref.ref(v) for v in t.values.values()]
    del t
    still = sum(w() is not None for w in watched)
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    left = [type(o).__name__ for o in gc.garbage if _made_by_a_capture(o)]
    return {"saved": len(watched), "alive_after_del": still, "left": left[:20], "kernel": kernel.current()}


@pytest.fixture(scope="module")
def dropped_traces() -> dict:
    """`_dropped_trace` for both save modes, in a fresh interpreter running this process's kernel."""
    script = ("import json; from tests.tracer.test_collector import _dropped_trace; "
              "print(json.dumps({s: _dropped_trace(s) for s in ('all', 'none')}))")
    env = {**os.environ, "TORCHLENS_EXPLORE_KERNEL": kernel.current()}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("save", ["all", "none"])
def test_a_dropped_trace_frees_what_its_capture_made_without_a_collection(save: str, dropped_traces) -> None:
    """Nothing a capture made waits for the cyclic GC: the session is no cycle (it was its own mode's
    recorder), so dropping the trace frees its records and saved values at once. What the capture made
    goes to the oldest generation, whose passes are rare: a cycle there held every value of every
    dropped capture until one ran."""
    result = dropped_traces[save]
    assert result["kernel"] == kernel.current()
    assert bool(result["saved"]) == (save == "all")
    assert result["alive_after_del"] == 0  # every saved value freed by the `del` alone
    assert result["left"] == [], result["left"]  # and no cycle of the capture's left for a collection
