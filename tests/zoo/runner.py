"""Run sweep tasks in long-lived forked workers: a wall-clock limit per task; a crash or timeout is a row.

A worker keeps what it imported (model modules, kernels) for its next task; one that times
out or dies is replaced, and only its task is marked.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any, Callable, Iterable

Task = tuple[Callable[..., dict[str, Any]], tuple]


def _worker(conn: Any) -> None:
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    while True:
        task = conn.recv()
        if task is None:
            return
        fn, args = task
        try:
            row = fn(*args)
        except BaseException as exc:  # the sweep function itself failed: report it as a row
            row = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        conn.send(row)


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.task: tuple[int, tuple, float] | None = None

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(5)
        self.conn.close()


def run_tasks(tasks: Iterable[Task], *, workers: int = 2, limit_s: float = 120.0,
              on_row: Callable[[dict[str, Any]], None] | None = None, fresh: bool = False) -> list[dict[str, Any]]:
    """Results of `fn(*args)` for each task, in task order; a timeout or crash gives `{"error": ...}`.

    `fresh=True` gives every task a new worker (forked from this process), so no task sees what an
    earlier one imported, compiled or captured (the feature sweep).
    """
    import tracer  # noqa: F401  (imported once, before the workers fork)

    ctx = mp.get_context("fork")
    pending = list(enumerate(tasks))
    results: dict[int, dict[str, Any]] = {}
    pool = [_Worker(ctx) for _ in range(workers)]
    try:
        while pending or any(w.task for w in pool):
            for k, w in enumerate(pool):
                if w.task is None and pending:
                    i, (fn, args) = pending.pop(0)
                    w.task = (i, args, time.monotonic())
                    w.conn.send((fn, args))
                if w.task is None:
                    continue
                i, args, started = w.task
                row = None
                if w.conn.poll():
                    try:
                        row = w.conn.recv()
                    except EOFError:
                        row = {"error": f"worker exited with code {w.proc.exitcode} (crash)"}
                elif not w.proc.is_alive():
                    row = {"error": f"worker exited with code {w.proc.exitcode} (crash)"}
                elif time.monotonic() - started > limit_s:
                    row = {"error": f"timed out after {limit_s:.0f}s"}
                if row is None:
                    continue
                if fresh or "error" in row and not w.proc.is_alive() or row.get("error", "").startswith("timed out"):
                    w.stop(kill=True)
                    pool[k] = w = _Worker(ctx)
                w.task = None
                row.setdefault("task", list(args))
                row["seconds"] = round(time.monotonic() - started, 2)
                results[i] = row
                if on_row is not None:
                    on_row(row)
            time.sleep(0.01)
    finally:
        for w in pool:
            w.stop(kill=True)
    return [results[i] for i in sorted(results)]
