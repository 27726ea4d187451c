"""What `app.worker` runs in its child process: each task takes its JSON request and a progress
callback and returns a JSON result (files it makes go where the request says)."""
from __future__ import annotations

import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

Report = Callable[[float, str], None]


def twin_task(request: dict[str, Any], report: Report) -> dict[str, Any]:
    """Check, build and capture the real twin; save it (structure only) where the request says."""
    from . import twin

    data = dict(request["spec"])
    if isinstance(data.get("input_shape"), list):
        data["input_shape"] = tuple(data["input_shape"])
    started = time.perf_counter()
    real = twin.checked_capture(twin.TwinSpec(**data), twin.StructureFacts(**request["facts"]), report)
    report(0.8, f"captured in {time.perf_counter() - started:.1f} s; handing it back")
    real.save(request["out"])
    return {"folder": request["out"]}


def estimate_task(request: dict[str, Any], report: Report) -> dict[str, Any]:
    """The twin's memory estimate (reads the config; may count a model's parameters on the meta device)."""
    from dataclasses import asdict

    from . import twin

    report(0.1, "reading the config")
    spec = twin.TwinSpec(**request["spec"])
    return asdict(twin.estimate(spec, twin.StructureFacts(**request["facts"])))


def memory_task(request: dict[str, Any], report: Report) -> dict[str, Any]:
    """The weights-free per-layer training-memory table of one step of the config at `request["config"]`."""
    from dataclasses import asdict

    from tracer.backward.memory import training_step_memory

    report(0.1, f"capturing one training step of {Path(request['config']).name} (weights-free)")
    return asdict(training_step_memory(request["config"], tuple(request["shape"])))


def export_task(request: dict[str, Any], report: Report) -> dict[str, Any]:
    """Write one export of the saved trace at `request["trace"]` to `request["path"]`."""
    import tracer

    kind, path, folder = request["kind"], Path(request["path"]), Path(request["trace"])
    if kind == "zip":
        report(0.2, f"zipping {path.name}")
        return {"path": str(zip_folder(folder, path))}
    report(0.1, "reading the trace")
    trace = tracer.load(str(folder))
    report(0.4, f"writing {path.name}")
    if kind == "model-explorer":  # the graph (with the backward beside it when the trace has one) and one
        # node-data file per overlay the trace offers, beside it
        from exporters import overlays
        from exporters.model_explorer import export_node_data
        from exporters.model_explorer.backward import export_graphs

        written = export_graphs(trace, path)
        data = export_node_data(trace, written, tuple(overlays.available(trace)))
        return {"path": str(written), "node_data": [str(p) for p in data.values()]}
    from exporters.figures import export_png, export_svg
    from exporters.layout import LayoutEngine

    write = {"svg": export_svg, "png": export_png}[kind]
    # the view as the app draws it: every op shown, the screen's spacing, the same expansion and folding
    return {"path": str(write(trace, path, expanded=request["expanded"], fold_repeats=request["fold_repeats"],
                              hide=(), engine=LayoutEngine(trace)))}


def zip_folder(folder: Path, path: Path) -> Path:
    """Zip the files of a saved trace folder into `path`, written beside it under a temporary name
    and renamed into place (a failed write leaves nothing)."""
    fd, tmp = tempfile.mkstemp(prefix=".tlx-zip-", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in sorted(folder.iterdir()):
                zf.write(f, arcname=f.name)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def layout_task(request: dict[str, Any], report: Report) -> dict[str, Any]:
    """The layout of the saved trace at `request["trace"]` for `request["expanded"]`, as plain lists (the
    alternative to a thread that tests/bench/bench_offloop.py measures; the app lays out on a thread)."""
    import tracer
    from exporters.layout import LayoutEngine

    report(0.1, "reading the trace")
    lay = LayoutEngine(tracer.load(request["trace"])).layout(request["expanded"],
                                                             fold_repeats=bool(request.get("fold_repeats")))
    return {"nodes": [[n.id, n.kind, n.label, n.x, n.y, n.width, n.height, n.op_label, n.module, n.repeat,
                       list(n.members)] for n in lay.nodes],
            "frames": [[f.address, f.label, f.depth, f.x0, f.y0, f.x1, f.y1, f.call] for f in lay.frames],
            "edges": [[e.source, e.target, e.points, e.back_edge] for e in lay.edges],
            "width": lay.width, "height": lay.height, "visible": dict(lay.visible)}


def probe_task(request: dict[str, Any], report: Report) -> dict[str, Any]:
    """The facility's own check (used by its tests): report, then sleep, refuse, crash or answer as asked."""
    report(0.5, f"probing in {os.getpid()}")
    if request.get("sleep"):
        time.sleep(float(request["sleep"]))
    if request.get("refuse"):
        from tracer.errors import InvalidInputError

        raise InvalidInputError("the probe was asked to refuse", site="probe", remedy="none")
    if request.get("crash"):
        sys.stderr.write("probe crashed on purpose\n")
        os._exit(3)
    return {"pid": os.getpid(), "ppid": os.getppid(), "nice": os.nice(0), "echo": request.get("echo")}


TASKS: dict[str, Callable[[dict[str, Any], Report], Any]] = {
    "twin": twin_task, "estimate": estimate_task, "export": export_task, "memory": memory_task,
    "layout": layout_task, "probe": probe_task,
}
