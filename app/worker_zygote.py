"""Task children forked from one warmed process (a zygote), so a job pays no interpreter start and no imports.

The zygote (`python -m app.worker_zygote FD`) starts at the worker's low priority, does the worker's imports
once (`app.worker.prepare`), then waits on a Unix socket shared with the server. For each job the server sends
three pipe ends (the child's stdin, stdout and stderr); the zygote forks, and the child makes its own session
(Cancel kills its group), takes the pipes as its standard streams and serves one request exactly as
`python -m app.worker` does (`app.worker.serve_request`), then exits. The zygote answers `pid N` for each fork
and `exit N STATUS` when it reaps the child. Nothing crosses the socket but those lines and the descriptors.

Forking after `import torch` is what PyTorch's own DataLoader workers do on Linux; the zygote itself never runs
a tensor op, so no intra-op thread pool exists when it forks. (A fork after CUDA initialisation would not be
safe: the zygote never touches CUDA.)
"""
from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from typing import IO

FORK_TIMEOUT_S = 120.0  # the zygote answers a fork once its imports are done (seconds on a busy 2-core host)


class ZygoteUnavailable(OSError):
    """The zygote is gone or did not answer: the caller starts a fresh interpreter instead."""


class ForkedChild:
    """One child of the zygote, with the parts of `subprocess.Popen` that `app.worker` uses."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes], exited: _Exit):
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self._exited = exited

    @property
    def returncode(self) -> int | None:
        return self._exited.code

    def poll(self) -> int | None:
        return self._exited.code

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.done.wait(timeout):
            raise subprocess.TimeoutExpired(f"zygote child {self.pid}", timeout or 0)
        return self._exited.code  # type: ignore[return-value]


class _Exit:
    """A child's exit status as its zygote reports it (the `Popen` convention: -N for signal N)."""

    def __init__(self) -> None:
        self.code: int | None = None
        self.done = threading.Event()

    def set(self, code: int) -> None:
        self.code = code
        self.done.set()


class Zygote:
    """The server's side of one zygote process."""

    def __init__(self, env: dict[str, str], cwd: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "app.worker_zygote", str(theirs.fileno())],
                                          pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._lock = threading.Lock()  # one fork asked at a time: a reply is the answer to the last request
        self._replies: queue.Queue[tuple[int, _Exit] | None] = queue.Queue()
        self._exits: dict[int, _Exit] = {}
        self._gone = threading.Event()
        threading.Thread(target=self._read, name="tlx-zygote-reader", daemon=True).start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return not self._gone.is_set() and self._proc.poll() is None

    def fork(self, timeout: float = FORK_TIMEOUT_S) -> ForkedChild:
        """A new child with its pipes; `ZygoteUnavailable` when the zygote is gone or silent for `timeout`."""
        with self._lock:
            if not self.alive():
                raise ZygoteUnavailable("the worker zygote is not running")
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            failure = "exited"
            try:
                socket.send_fds(self._sock, [b"fork\n"], [in_r, out_w, err_w])
                reply = self._replies.get(timeout=timeout)
            except (OSError, queue.Empty) as exc:
                reply, failure = None, f"did not answer: {exc!r}"
                self.stop()  # silent or broken: never trusted again
            finally:
                for fd in (in_r, out_w, err_w):  # the child's ends: the zygote has its own copies now
                    os.close(fd)
            if reply is None:
                for fd in (in_w, out_r, err_r):
                    os.close(fd)
                raise ZygoteUnavailable(f"the worker zygote {failure}")
            pid, exited = reply
            return ForkedChild(pid, os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"), exited)

    def stop(self) -> None:
        """End the zygote (its children are the caller's to kill: `app.worker` kills each one's group)."""
        self._gone.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=30)

    def _read(self) -> None:
        """The zygote's lines: `pid N` answers a fork; `exit N STATUS` ends child N."""
        try:
            for line in self._sock.makefile("r", encoding="ascii"):
                kind, *fields = line.split()
                if kind == "pid":
                    exited = self._exits[int(fields[0])] = _Exit()
                    self._replies.put((int(fields[0]), exited))
                elif kind == "exit" and int(fields[0]) in self._exits:
                    self._exits.pop(int(fields[0])).set(int(fields[1]))
        except (OSError, ValueError):
            pass
        self._gone.set()
        self._replies.put(None)
        for pid, exited in list(self._exits.items()):  # orphans now: nobody will report their status
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            exited.set(-signal.SIGKILL)


# -- the zygote's side ----------------------------------------------------------------------
def serve(sock: socket.socket) -> int | None:
    """Fork one child per request until the server hangs up (then None). In a child it returns that child's
    exit status, after serving its one request."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a child's exit wakes the select through wake_r
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock)
        if sock not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(sock, 64, 3)
        if not message or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            return None
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w):
                os.close(fd)
            sock.close()
            return _child(fds)
        for fd in fds:
            os.close(fd)
        sock.sendall(f"pid {pid}\n".encode())


def _reap(sock: socket.socket) -> None:
    """Report every child that has ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child left
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):
            sock.sendall(f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


def _child(fds: list[int]) -> int:
    """In a forked child: its own session, the sent pipes as stdin, stdout and stderr, one request served."""
    from .worker import serve_request

    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    return serve_request()


def main() -> int:
    from .worker import prepare

    sock = socket.socket(fileno=int(sys.argv[1]))
    prepare()
    try:
        code = serve(sock)
    except SystemExit as exc:  # in a child: a task that exits
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # in a child: what a fresh interpreter would print and exit 1 on
        traceback.print_exc()
        code = 1
    if code is None:  # the zygote, its server gone
        return 0
    _leave(code)
    return code  # not reached


def _leave(code: int) -> None:
    """End a forked child: its exit handlers run, its streams are flushed, then it exits at once. The
    interpreter's own finalization (freeing every module torch and transformers loaded, about 0.4 s of CPU)
    is skipped, as a multiprocessing child skips it: nothing is left to it but memory the exit frees."""
    import atexit

    try:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
