"""Serve an exported graph with the real Model Explorer server (a subprocess on loopback).

`serve(path)` starts `model-explorer FILE --host 127.0.0.1 --port P --no_open_in_browser` on a
private port with a minimal environment, puts a loopback front before it (`front.py`: Host and
Origin by allowlist, only the viewer's routes, `read_text_file` only for the exported files, the
page's off-machine font links dropped and a same-origin CSP), waits for `/check_health`,
reads the file back through the front and checks it equals the file on disk. Used as a context
manager it yields the URL that opens the file and stops both (SIGTERM) on exit.
"""
from __future__ import annotations

import atexit
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Sequence
from urllib.parse import quote

from ..errors import (
    ModelExplorerReadbackError,
    ModelExplorerServerError,
    ModelExplorerUnavailableError,
    NonLoopbackHostError,
)

from .front import ModelExplorerFront

_PORT_TRIES = 3
_LIVE: "weakref.WeakSet[ModelExplorerServer]" = weakref.WeakSet()
_LAUNCH_LOCK = threading.Lock()
_exiting = False  # set by _stop_all: a thread still starting a server then launches none that would outlive us


@atexit.register
def _stop_all() -> None:
    """Stop every server still running when the interpreter exits (its own session group is not ours), and
    launch no more."""
    global _exiting
    with _LAUNCH_LOCK:
        _exiting = True
    for server in list(_LIVE):
        server.stop(timeout=5.0)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def open_url(base_url: str, path: str | Path, node_data: Sequence[str | Path] = ()) -> str:
    """The Model Explorer URL that opens the graph file `path` (and node-data files) on a server."""
    data: dict = {"models": [{"url": str(Path(path).resolve())}]}
    if node_data:
        data["nodeData"] = [str(Path(p).resolve()) for p in node_data]
        data["nodeDataTargets"] = ["" for _ in node_data]
    return f"{base_url}/?data={quote(json.dumps(data))}"


class ModelExplorerServer:
    """A running Model Explorer server on one graph file; `with` it to get the URL and stop it after."""

    def __init__(self, path: str | Path, host: str = "127.0.0.1", port: int | None = None, *,
                 node_data: Sequence[str | Path] = (), timeout: float = 60.0,
                 allow_non_loopback: bool = False, allowed_hosts: Sequence[str] = ()) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise ModelExplorerServerError(f"no graph file at {self.path}", site="serve(path=...)",
                                           remedy="Export the trace first: exporters.model_explorer.export(trace, path).")
        if not allow_non_loopback and not _is_loopback(host):
            raise NonLoopbackHostError(f"refusing to bind Model Explorer to {host!r}", site="serve(host=...)", host=host)
        self.host = host
        self.port = port
        self.allowed_hosts = tuple(allowed_hosts)  # names the front answers besides 127.0.0.1, localhost, [::1]
        self.node_data = tuple(Path(p).resolve() for p in node_data)
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.front: ModelExplorerFront | None = None
        self.fronted = _is_loopback(host)  # a deliberately non-loopback server is the bare vendor server
        self.backend_port: int | None = None
        self._log = None
        self._home: str | None = None

    @property
    def base_url(self) -> str:
        """Where a browser goes: the front (or the bare server when not on loopback)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def backend_url(self) -> str:
        if not self.fronted:
            return self.base_url
        return f"http://127.0.0.1:{self.backend_port}"

    @property
    def url(self) -> str:
        """The URL that opens the served graph (with its node data) in Model Explorer."""
        return open_url(self.base_url, self.path, self.node_data)

    def start(self) -> "ModelExplorerServer":
        """Start the server, wait until healthy, and check it serves the file unchanged."""
        tries = 1 if (self.port is not None and not self.fronted) else _PORT_TRIES
        pick = self.port is None
        for attempt in range(tries):
            if self.fronted:
                self.backend_port = free_port("127.0.0.1")
            elif pick:
                self.port = free_port(self.host)
            try:
                self._launch()
                self._wait_healthy()
                break
            except ModelExplorerServerError:
                self.stop()
                if attempt == tries - 1:
                    raise
        try:
            if self.fronted:
                self._open_front()
            self._check_readback()
        except Exception:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server with SIGTERM (SIGKILL after `timeout` seconds); safe to call twice."""
        front, self.front = self.front, None
        if front is not None:
            front.stop()
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    @property
    def log(self) -> str:
        """What the server printed so far."""
        if self._log is None:
            return ""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def __enter__(self) -> str:
        if self.process is None:
            self.start()
        return self.url

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- steps -------------------------------------------------------------------------
    def _launch(self) -> None:
        host, port = ("127.0.0.1", self.backend_port) if self.fronted else (self.host, self.port)
        launcher = _guarded_command(port) if self.fronted else None  # the backend answers only its front
        cmd = [*(launcher or _command()), str(self.path), "--host", host, "--port", str(port), "--no_open_in_browser"]
        if self.node_data:
            cmd += ["--node_data_paths", ",".join(str(p) for p in self.node_data)]
        if self._log is not None:
            self._log.close()
        self._log = tempfile.NamedTemporaryFile("w+", prefix="model-explorer-", suffix=".log", delete=True)
        if self._home is None:
            self._home = tempfile.mkdtemp(prefix="model-explorer-home-")
        env = minimal_environment(self._home)
        with _LAUNCH_LOCK:
            if _exiting:
                raise ModelExplorerServerError("the process is exiting: no Model Explorer server is started",
                                               site=self.base_url, log="", port=self.port)
            self.process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True)
            _LIVE.add(self)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ModelExplorerServerError(f"the Model Explorer server exited (status {code}) before answering",
                                               site=self.base_url, log=self.log[-2000:], port=self.port)
            try:
                if _get(f"{self.backend_url}/check_health", 2.0) == "model_explorer_ok":
                    return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise ModelExplorerServerError(f"the Model Explorer server did not answer /check_health in {self.timeout:.0f} s",
                                       site=self.base_url, log=self.log[-2000:], port=self.port)

    def _open_front(self) -> None:
        try:
            self.front = ModelExplorerFront(self.backend_url, (self.path, *self.node_data), self.port or 0,
                                            allowed_hosts=self.allowed_hosts)
        except OSError as exc:
            raise ModelExplorerServerError(f"cannot listen on 127.0.0.1:{self.port}", site="serve(port=...)",
                                           log=f"127.0.0.1:{self.port} is already in use or not allowed ({exc})",
                                           port=self.port) from None
        self.port = self.front.port

    def _check_readback(self) -> None:
        on_disk = self.path.read_text(encoding="utf-8")
        for file in (self.path, *self.node_data):
            body = _get(f"{self.base_url}/api/v1/read_text_file?path={quote(str(file))}", 30.0)
            served = json.loads(body)
            expected = on_disk if file == self.path else file.read_text(encoding="utf-8")
            if served.get("content") != expected:
                raise ModelExplorerReadbackError(
                    f"the server returned different content for {file}", site=f"{self.base_url}/api/v1/read_text_file",
                    error=served.get("error"), served_chars=len(served.get("content") or ""), file_chars=len(expected),
                )


def serve(path: str | Path, host: str = "127.0.0.1", port: int | None = None, *,
          node_data: Sequence[str | Path] = (), timeout: float = 60.0,
          allow_non_loopback: bool = False, allowed_hosts: Sequence[str] = ()) -> ModelExplorerServer:
    """Start Model Explorer on an exported graph file; `with serve(p) as url:` stops it on exit.

    The port is picked when `port` is None; any host other than loopback is refused unless
    `allow_non_loopback=True` (then the vendor server is bound bare, without the front, and reads
    any file a client names). The front answers requests whose Host is 127.0.0.1, localhost or [::1]
    on its port, or one of `allowed_hosts`; any other Host gets 421.
    """
    return ModelExplorerServer(path, host, port, node_data=node_data, timeout=timeout,
                               allow_non_loopback=allow_non_loopback, allowed_hosts=allowed_hosts).start()


ENV_PASSED = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")  # what the server needs to start; nothing else is passed


def minimal_environment(home: str) -> dict[str, str]:
    """The server's environment: PATH and locale only, an empty private HOME and TMPDIR, no user secrets."""
    env = {k: os.environ[k] for k in ENV_PASSED if k in os.environ}
    env.update({"HOME": home, "TMPDIR": home, "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"})
    return env


def _command() -> list[str]:
    beside = Path(sys.executable).with_name("model-explorer")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("model-explorer")
    if found:
        return [found]
    import importlib.util

    if importlib.util.find_spec("model_explorer") is None:
        raise ModelExplorerUnavailableError("the model-explorer command is not installed", site="serve()")
    return [sys.executable, "-m", "model_explorer"]


def _guarded_command(port: int) -> list[str] | None:
    """This interpreter running the vendor server through `backend_guard.py` (None if it lacks model_explorer)."""
    import importlib.util

    if importlib.util.find_spec("model_explorer") is None or importlib.util.find_spec("flask") is None:
        return None
    return [sys.executable, str(Path(__file__).with_name("backend_guard.py")), str(port)]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy


def _get(url: str, timeout: float) -> str:
    with _OPENER.open(url, timeout=timeout) as resp:
        return resp.read().decode("utf-8")
