"""Build and capture a real twin in a child process, so the server's interpreter stays free.

The parent (`capture_isolated`) sends the twin's description and the limits as JSON on stdin;
the child (`python -m app.twin_worker OUT`) reports progress as JSON lines, saves the real
trace (structure only, no values) into OUT, and reports a refusal as its typed error's dict.
Cancelling kills the child.
"""
from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tracer.errors import CaptureError, TracerError

from . import tempdirs
from .limits import Limits, current, set_limits

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def capture_isolated(spec: Any, progress: Callable[[float, str], None]) -> Any:
    """`twin.capture_twin` in a child process; returns the real trace loaded back (typed refusals re-raised)."""
    import tracer

    from .views.docsync import Cancelled

    out = tempdirs.make("tlx-twin-")
    request = {"spec": dataclasses.asdict(spec), "limits": dataclasses.asdict(current())}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.Popen([sys.executable, "-m", "app.twin_worker", str(out)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(PROJECT_ROOT),
                            start_new_session=True)
    is_cancelled = getattr(progress, "is_cancelled", lambda: False)
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
        error = None
        buffered = b""
        while True:
            if is_cancelled():
                raise Cancelled("the twin's capture was cancelled")
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                message = json.loads(line)
                if "progress" in message:
                    progress(message["progress"], message["text"])
                elif "error" in message:
                    error = message
        proc.wait(timeout=30)
        if error is not None:
            raise _rebuild(error)
        if proc.returncode != 0:
            tail = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            raise CaptureError(f"the twin's capture process failed (status {proc.returncode}): {tail[0][:300]}",
                               site="discharge panel")
        return tracer.load(str(out / "real"))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        tempdirs.remove(out)


def _rebuild(message: dict) -> TracerError:
    from tracer.errors import all_error_classes

    from . import errors as _app_errors  # noqa: F401  (the app's classes are TracerError subclasses too)

    data = message["error"]
    by_name = {c.__name__: c for c in all_error_classes()}
    cls = by_name.get(message.get("class", ""), TracerError)
    return cls(data["message"], site=data.get("site"), remedy=data.get("remedy"), code=data["code"],
               **(data.get("findings") or {}))


def _emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(out: str) -> int:
    """Child side: read the request, capture the twin, save it; report progress and refusals on stdout."""
    from . import twin

    request = json.loads(sys.stdin.read())
    set_limits(Limits(**request["limits"]))
    spec_data = request["spec"]
    if isinstance(spec_data.get("input_shape"), list):
        spec_data["input_shape"] = tuple(spec_data["input_shape"])
    spec = twin.TwinSpec(**spec_data)
    started = time.perf_counter()
    try:
        real = twin.capture_twin(spec, lambda f, text: _emit({"progress": f, "text": text}))
        _emit({"progress": 0.8, "text": f"captured in {time.perf_counter() - started:.1f} s; handing it back"})
        real.save(str(Path(out) / "real"))
    except TracerError as exc:
        _emit({"error": exc.to_dict(), "class": type(exc).__name__})
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
