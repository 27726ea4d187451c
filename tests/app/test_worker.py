"""The worker-process facility (`app.worker`): heavy work runs in a child at a lower CPU priority,
its refusals come back typed, a crash is `worker_failed`, Cancel kills it, and the doctor, the
memory estimate and the exports give what the same code gives in the server's process."""
from __future__ import annotations

import os
import threading
import time

import pytest

from app import twin
from app.errors import WorkerFailedError
from app.views.docsync import Cancelled
from app.worker import run_task, saved_copy
from app.worker_zygote import ZygoteUnavailable
from tracer.errors import InvalidInputError


def _quiet(_f, _t):
    return None


def test_a_task_runs_in_another_process_at_a_lower_priority():
    seen = []
    result = run_task("probe", {"echo": "hi"}, lambda f, t: seen.append((f, t)), site="test")
    assert result["pid"] != os.getpid() and result["echo"] == "hi"
    assert result["nice"] >= os.nice(0) + 10 or result["nice"] == 19
    assert seen == [(0.5, f"probing in {result['pid']}")]


def test_a_refusal_comes_back_as_its_class_and_a_crash_as_worker_failed():
    with pytest.raises(InvalidInputError) as info:
        run_task("probe", {"refuse": True}, _quiet, site="test")
    assert info.value.code == "invalid_input" and info.value.site == "probe"
    with pytest.raises(WorkerFailedError) as crash:
        run_task("probe", {"crash": True}, _quiet, site="test site")
    assert "status 3" in crash.value.message and "probe crashed on purpose" in crash.value.message
    assert crash.value.site == "test site" and crash.value.code == "worker_failed"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cancel_kills_the_child_within_a_poll():
    cancel = threading.Event()
    pids = []

    def progress(_f, text):
        pids.append(int(text.split()[-1]))
        cancel.set()

    progress.is_cancelled = cancel.is_set
    started = time.perf_counter()
    with pytest.raises(Cancelled):
        run_task("probe", {"sleep": 120}, progress, site="test")
    assert time.perf_counter() - started < 60  # far less than the 120 s the child would sleep
    assert pids and not _alive(pids[0])


def test_the_estimate_in_a_worker_equals_the_estimate_here(gpt2_loaded):
    _, attn = twin.structure_defaults(gpt2_loaded.trace)
    for spec in (twin.TwinSpec(config="gpt2", attn=attn, input_shape="2,8"), twin.TwinSpec(config="bert-base")):
        here, there = twin.estimate(spec, gpt2_loaded.trace), twin.estimate_isolated(spec, gpt2_loaded.trace, _quiet)
        assert (there.params, there.param_bytes, there.activation_bytes) == (here.params, here.param_bytes,
                                                                            here.activation_bytes)


def test_the_training_memory_table_from_a_worker_is_the_one_made_here():
    from app.sources import resolve_config
    from app.views.memory import memory_isolated
    from tracer.backward.memory import training_step_memory

    path = str(resolve_config("gpt2"))
    here = training_step_memory(path, (1, 8))
    there = memory_isolated(path, (1, 8), _quiet)
    assert there == here and there.rows and there.total_saved_bytes > 0


def test_a_trace_is_saved_once_per_graph_and_envelope(gpt2_loaded):
    import copy

    import tracer

    a, b = copy.copy(gpt2_loaded.trace), copy.copy(gpt2_loaded.trace)
    assert saved_copy(a) == saved_copy(b)  # two sessions, one saved copy
    folder = saved_copy(a)
    assert tracer.load(str(folder)).model_class == gpt2_loaded.trace.model_class


def test_a_child_still_running_is_killed_when_the_server_exits():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = ("import threading; from app.worker import run_task; seen = []; ev = threading.Event(); "
              "threading.Thread(target=lambda: run_task('probe', {'sleep': 120}, lambda f, t: (seen.append(t), ev.set()), "
              "site='t'), daemon=True).start(); ev.wait(120); print('child', seen[0].split()[-1], flush=True)")
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=180)
    assert out.stdout.startswith("child "), out.stderr
    child, deadline = int(out.stdout.split()[1]), time.monotonic() + 60  # its kill is asked as the server exits:
    while _alive(child) and time.monotonic() < deadline:  # wait for it to land (a loaded host takes its time),
        time.sleep(0.05)  # far short of the 120 s it would sleep
    assert not _alive(child)


def test_each_job_is_a_child_forked_from_the_zygote_that_did_the_imports_once():
    import app.worker as worker

    worker.warm()
    zygote = worker._ZYGOTE
    assert zygote is not None and zygote.alive() and zygote.pid != os.getpid()
    first, second = (run_task("probe", {}, _quiet, site="test") for _ in range(2))
    assert first["pid"] != second["pid"]  # one child per job ...
    assert first["ppid"] == second["ppid"] == zygote.pid  # ... each forked from the same zygote
    assert worker._ZYGOTE is zygote and zygote.alive() and not _alive(first["pid"])


def test_a_dead_zygote_is_replaced_and_without_one_a_job_starts_its_own_interpreter(monkeypatch):
    import signal

    import app.worker as worker

    worker.warm()
    dead = worker._ZYGOTE
    os.killpg(dead.pid, signal.SIGKILL)
    dead._proc.wait(timeout=30)  # gone (a job that asks a zygote dying meanwhile gets its own interpreter)
    with pytest.raises(ZygoteUnavailable):
        dead.fork()
    again = run_task("probe", {}, _quiet, site="test")
    assert worker._ZYGOTE is not dead and again["ppid"] == worker._ZYGOTE.pid  # a new zygote served it

    def no_fork_server(*_a, **_k):
        raise OSError("no fork server")

    monkeypatch.setattr(worker, "_ZYGOTE", None)
    monkeypatch.setattr(worker, "Zygote", no_fork_server)
    alone = run_task("probe", {"echo": "x"}, _quiet, site="test")
    assert alone["ppid"] == os.getpid() and alone["echo"] == "x"  # python -m app.worker, started for the job
