"""Heavy work in a child process, so the server's interpreter (its GIL and event loop) stays free.

`run_task(name, request, progress)` takes a child forked for the job from a process that did the imports once
(`app.worker_zygote`, started ahead at a lower CPU priority; `warm()`), or where that process is not there a
fresh `python -m app.worker`; it sends the task's name, the request and
the limits in force as JSON on stdin, relays the child's progress lines,
and returns its JSON result. A refusal in the child comes back as the same typed error; a child
that dies is `worker_failed`; Cancel (the progress callback's `is_cancelled`) kills the child and
its process group. Nothing crosses the pipe but JSON; traces cross as saved folders
(`saved_copy`). The tasks are the functions in `app.worker_tasks.TASKS`.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from tracer.errors import TracerError

from . import tempdirs
from .errors import WorkerFailedError
from .limits import Limits, current, set_limits
from .worker_zygote import ForkedChild, Zygote, ZygoteUnavailable

PROJECT_ROOT = Path(__file__).resolve().parents[1]
NICE = 19  # the lowest priority: the child yields the CPU to the server process (2 cores serve every session)
STDERR_TAIL = 4096  # bytes of the child's stderr kept for the message of a crash

Progress = Callable[[float, str], None]
_LIVE: set[subprocess.Popen | ForkedChild] = set()  # children still running, killed if the server exits first
_ZYGOTE: Zygote | None = None  # the process the children are forked from, its imports done
_ZYGOTE_LOCK = threading.Lock()
PRELOAD = ("torch", "tracer", "tracer.bridges.transformers", "tracer.backward.memory", "exporters.figures",
           "exporters.model_explorer", "app.twin")


def run_task(task: str, request: dict[str, Any], progress: Progress, *, site: str) -> Any:
    """Run `app.worker_tasks.TASKS[task](request, report)` in a child process; returns its result."""
    from .views.docsync import Cancelled

    proc = _take()
    is_cancelled = getattr(progress, "is_cancelled", lambda: False)
    try:
        proc.stdin.write(json.dumps({**request, "task": task, "limits": dataclasses.asdict(current())}).encode())
        proc.stdin.close()
        outcome: dict[str, Any] = {}
        buffered, errors = b"", b""
        open_streams = [proc.stdout, proc.stderr]
        while open_streams:
            if is_cancelled():
                raise Cancelled(f"the {task} worker was cancelled")
            ready, _, _ = select.select(open_streams, [], [], 0.2)
            for stream in ready:
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    open_streams.remove(stream)
                elif stream is proc.stderr:
                    errors = (errors + chunk)[-STDERR_TAIL:]
                else:
                    buffered += chunk
                    while b"\n" in buffered:
                        line, buffered = buffered.split(b"\n", 1)
                        _handle(json.loads(line), progress, outcome)
        proc.wait(timeout=30)
        if "error" in outcome:
            raise _rebuild(outcome["error"])
        if proc.returncode != 0 or "result" not in outcome:
            tail = errors.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            raise WorkerFailedError(f"the {task} worker process failed (status {proc.returncode}): {tail[0][:300]}",
                                    site=site)
        return outcome["result"]
    finally:
        _kill(proc)
        _LIVE.discard(proc)
        for stream in (proc.stdout, proc.stderr):
            stream.close()


def warm() -> None:
    """Have the zygote ready: started now, it imports torch, transformers and the exporters once and then
    forks a child per job, so no job waits for those imports or pays for them again."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or not _ZYGOTE.alive():
            try:
                _ZYGOTE = Zygote(_child_env(), str(PROJECT_ROOT))
            except OSError:  # no fork server here: each job starts its own interpreter
                _ZYGOTE = None


def _take() -> subprocess.Popen | ForkedChild:
    warm()
    zygote = _ZYGOTE
    if zygote is not None:
        try:
            proc = zygote.fork()
        except ZygoteUnavailable:
            pass
        else:
            _LIVE.add(proc)
            return proc
    return _spawn()


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _spawn() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "app.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_child_env(), cwd=str(PROJECT_ROOT), start_new_session=True)
    _LIVE.add(proc)
    return proc


def _kill(proc: subprocess.Popen | ForkedChild) -> None:
    """Kill a child still running, with its process group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # ended meanwhile; its status is on its way
            pass
        proc.wait(timeout=30)


@atexit.register
def _kill_all() -> None:
    for proc in list(_LIVE):
        _kill(proc)
    if _ZYGOTE is not None:
        _ZYGOTE.stop()


def _handle(message: dict[str, Any], progress: Progress, outcome: dict[str, Any]) -> None:
    if "progress" in message:
        progress(message["progress"], message["text"])
    else:
        outcome.update(message)


def _rebuild(message: dict[str, Any]) -> TracerError:
    """The child's refusal as its own class (any documented class of the three layers)."""
    from tracer.errors import all_error_classes

    from . import errors as _app_errors  # noqa: F401  (the app's classes are TracerError subclasses too)

    data = message["error"]
    by_name = {c.__name__: c for c in all_error_classes()}
    cls = by_name.get(message.get("class", ""), TracerError)
    return cls(data["message"], site=data.get("site"), remedy=data.get("remedy"), code=data["code"],
               **(data.get("findings") or {}))


# -- the trace a child reads --------------------------------------------------------------
_SAVED: dict[tuple[int, int, int, str], tuple[Any, Path]] = {}
_SAVED_LOCK = threading.Lock()


def saved_copy(trace: Any) -> Path:
    """A folder holding `trace` saved (JSON + safetensors), made once per graph, values, envelope and name.

    Sessions share the loaded trace's graph and values; a discharge gives a session a new envelope,
    hence a new folder. The folders live in the app's temporary area and go when the process exits.
    """
    key = (id(trace.ops), id(trace.values), id(trace.envelope), trace.model_class)
    with _SAVED_LOCK:
        hit = _SAVED.get(key)
        if hit is None or not hit[1].exists():
            folder = Path(trace.save(str(tempdirs.make("tlx-handoff-") / "trace")))
            hit = _SAVED[key] = (trace, folder)  # the trace is kept so its ids are not reused
        return hit[1]


# -- the child side -------------------------------------------------------------------------
def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def prepare() -> None:
    """A child's start: the lowest CPU priority, then the heavy imports (done once, in the zygote)."""
    import importlib

    try:
        os.nice(NICE)
    except OSError:
        pass
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part (transformers) that is not installed
            pass


def serve_request() -> int:
    """Read the request on stdin, run its task, write progress, then its result or refusal; the exit status."""
    from .worker_tasks import TASKS

    request = json.loads(sys.stdin.read())
    set_limits(Limits(**request.pop("limits")))
    try:
        result = TASKS[request.pop("task")](request, lambda f, text: _emit({"progress": f, "text": text}))
    except TracerError as exc:
        _emit({"error": {"error": exc.to_dict(), "class": type(exc).__name__}})
        return 2
    _emit({"result": result})
    return 0


def main() -> int:
    """A child started on its own (no zygote): prepare, then serve one request."""
    prepare()
    return serve_request()


if __name__ == "__main__":
    raise SystemExit(main())
